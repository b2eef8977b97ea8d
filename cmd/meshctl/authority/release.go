package authority

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/mesh-host/mesh-host/drivers"
)

// A host release is a build of mesh-host packed as an archive with the
// executable mesh-host at its top. The control plane keeps releases in
// DATA/releases, each named for its digest, serves them over HTTP, and
// delivers one to a node as an archive resource unpacked into
// /opt/mesh-host/versions/${version}, where the launcher finds it: the
// node fetches by digest, checks it, and unpacks it beside the running
// version, never over it.

// VersionsDir is where a node keeps its host versions; the release
// resource is the archive under it.
const VersionsDir = "/opt/mesh-host/versions"

// ReleasePath is the path of a release's archive resource: ${version}
// expands to the archive's digest.
const ReleasePath = VersionsDir + "/${version}"

// releasesDir is DATA/releases.
const releasesDir = "releases"

// ReleasesDir is where the authority's releases are kept and served from.
func (a *Authority) ReleasesDir() string { return filepath.Join(a.Dir, releasesDir) }

// releaseFormats are the archive formats a release may have, as the
// archive resource names them; each is also the stored file's extension.
var releaseFormats = []string{"tar", "tar.gz", "tar.zst", "zip"}

// releaseName is a stored release's file name: a sha256 and a format.
var releaseName = regexp.MustCompile(`^[0-9a-f]{64}\.(tar|tar\.gz|tar\.zst|zip)$`)

// Release is a host build stored by the control plane.
type Release struct {
	// Digest is "sha256:" and the archive's hex digest.
	Digest string
	// Format is tar, tar.gz, tar.zst or zip.
	Format string
}

// Name is the release's file name in the releases directory and its URL.
func (r Release) Name() string { return strings.TrimPrefix(r.Digest, "sha256:") + "." + r.Format }

// Version is the version directory the release unpacks into on a node.
func (r Release) Version() string { return strings.TrimPrefix(r.Digest, "sha256:") }

// Resource is the archive resource that delivers r, fetched from base
// (the URL the releases directory is served at).
func (r Release) Resource(base string) *drivers.ArchiveSpec {
	return &drivers.ArchiveSpec{
		Path:   ReleasePath,
		Source: strings.TrimSuffix(base, "/") + "/" + r.Name(),
		Digest: r.Digest,
		Format: r.Format,
	}
}

// StoreRelease checks that the file at src is a host release (an archive
// of a known format with an executable mesh-host at its top) and copies it
// into dir under its digest, unless it is there already. The format is
// read from the content, not the name.
func StoreRelease(dir, src string) (Release, error) {
	f, err := os.Open(src)
	if err != nil {
		return Release{}, err
	}
	defer f.Close()
	var r Release
	if r.Format, err = sniffFormat(f); err != nil {
		return r, fmt.Errorf("%w: %s: %w", ErrRefused, src, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return r, err
	}
	if err := checkHost(f, r.Format); err != nil {
		return r, fmt.Errorf("%w: %s is not a host release: %w", ErrRefused, src, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return r, err
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	tmp, err := os.CreateTemp(dir, ".release-*")
	if err != nil {
		return r, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), f); err != nil {
		tmp.Close()
		return r, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return r, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return r, err
	}
	if err := tmp.Close(); err != nil {
		return r, err
	}
	r.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	// Same name, same bytes: a release stored twice is renamed over
	// itself, which changes nothing a reader could see.
	if err := os.Rename(tmp.Name(), filepath.Join(dir, r.Name())); err != nil {
		return r, err
	}
	return r, nil
}

// sniffFormat tells the archive format from the first bytes.
func sniffFormat(f io.Reader) (string, error) {
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		if errors.Is(err, io.EOF) {
			return "", errors.New("the file is empty")
		}
		return "", err
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return "tar.gz", nil
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "tar.zst", nil
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		return "zip", nil
	case len(head) >= 262 && bytes.Equal(head[257:262], []byte("ustar")):
		return "tar", nil
	}
	return "", fmt.Errorf("not an archive a node can unpack (%s)", strings.Join(releaseFormats, ", "))
}

// checkHost finds mesh-host at the archive's top: a regular file the
// owner may execute, for the launcher starts only such a version.
func checkHost(f *os.File, format string) error {
	if format == "zip" {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		zr, err := zip.NewReader(f, fi.Size())
		if err != nil {
			return err
		}
		for _, e := range zr.File {
			if topName(e.Name) == "mesh-host" {
				return hostMode(e.Mode())
			}
		}
		return errors.New("it holds no mesh-host at its top")
	}
	var r io.Reader = bufio.NewReader(f)
	switch format {
	case "tar.gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	case "tar.zst":
		zr, err := zstd.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return errors.New("it holds no mesh-host at its top")
		}
		if err != nil {
			return err
		}
		if topName(h.Name) == "mesh-host" {
			if h.Typeflag != tar.TypeReg {
				return errors.New("its mesh-host is not a regular file")
			}
			return hostMode(h.FileInfo().Mode())
		}
	}
}

// topName is an entry's name as the archive driver reads it: "./" before
// it and "/" after a directory's name mean nothing.
func topName(name string) string {
	return strings.TrimSuffix(strings.TrimPrefix(name, "./"), "/")
}

func hostMode(m fs.FileMode) error {
	if !m.IsRegular() {
		return errors.New("its mesh-host is not a regular file")
	}
	if m.Perm()&0o100 == 0 {
		return fmt.Errorf("its mesh-host is not executable (mode %v)", m.Perm())
	}
	return nil
}

// buildArchiveName is how packaging/build names a release archive:
// mesh-host-LABEL-linux-ARCH.release.EXT.
var buildArchiveName = regexp.MustCompile(`^mesh-host-(.+)-linux-[a-z0-9]+\.release\.`)

// ReleaseLabel is the build label packaging/build put in a release
// archive's name ("" for an archive named otherwise): the name a person
// knows the release by, which the node reports once it runs it.
func ReleaseLabel(archive string) string {
	if m := buildArchiveName.FindStringSubmatch(filepath.Base(archive)); m != nil {
		return m[1]
	}
	return ""
}

// isRelease reports whether s is a host release's archive resource: an
// archive unpacked under VersionsDir.
// there is no authentication.
type ReleaseServer struct {
	// Dir is the releases directory.
	Dir string
	// Log receives refused requests at debug level.
	Log *slog.Logger
}

var _ http.Handler = (*ReleaseServer)(nil)

func (s *ReleaseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// The raw path, not the cleaned one: /x/../NAME is refused, not
	// resolved.
	name, ok := strings.CutPrefix(r.URL.EscapedPath(), "/")
	if !ok || !releaseName.MatchString(name) {
		s.refuse(w, r, "not a release name")
		return
	}
	root, err := os.OpenRoot(s.Dir)
	if err != nil {
		s.refuse(w, r, err.Error())
		return
	}
	defer root.Close()
	// Lstat first: a symlink in the directory is not a release.
	fi, err := root.Lstat(name)
	if err != nil || !fi.Mode().IsRegular() {
		s.refuse(w, r, "no such release")
		return
	}
	f, err := root.Open(name)
	if err != nil {
		s.refuse(w, r, "no such release")
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	// A release never changes under its name.
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	http.ServeContent(w, r, name, fi.ModTime(), f)
}

func (s *ReleaseServer) refuse(w http.ResponseWriter, r *http.Request, why string) {
	if s.Log != nil {
		s.Log.Debug("release request refused", "path", r.URL.EscapedPath(), "from", r.RemoteAddr, "why", why)
	}
	http.NotFound(w, r)
}
