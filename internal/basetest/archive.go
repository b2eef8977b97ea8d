package basetest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"compress/gzip"

	"github.com/klauspost/compress/zstd"
)

// Entry is one file of an archive Pack writes; a Name ending in "/" is a
// directory.
type Entry struct {
	Name string
	Mode int64
	Body string
}

// Pack writes entries as an archive of format ("tar", "tar.gz", "tar.zst"
// or "zip") into a new file in dir and returns its path.
func Pack(t testing.TB, dir, format string, entries []Entry) string {
	t.Helper()
	var buf bytes.Buffer
	if format == "zip" {
		zw := zip.NewWriter(&buf)
		for _, e := range entries {
			h := &zip.FileHeader{Name: e.Name, Method: zip.Deflate}
			h.SetMode(os.FileMode(e.Mode))
			w, err := zw.CreateHeader(h)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(w, e.Body)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	} else {
		var w io.WriteCloser = nopCloser{&buf}
		switch format {
		case "tar.gz":
			w = gzip.NewWriter(&buf)
		case "tar.zst":
			zw, err := zstd.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			w = zw
		}
		tw := tar.NewWriter(w)
		for _, e := range entries {
			h := &tar.Header{Name: e.Name, Mode: e.Mode, Size: int64(len(e.Body)), Typeflag: tar.TypeReg}
			if strings.HasSuffix(e.Name, "/") {
				h.Typeflag, h.Size = tar.TypeDir, 0
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			io.WriteString(tw, e.Body)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.CreateTemp(dir, "build-*."+format)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
