package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
)

// fetch copies the archive into a nameless file in dirfd (created under a
// temporary name beside base and unlinked at once) and checks its digest.
// The file is positioned at its start; the caller closes it.
func (d *Driver) fetch(ctx context.Context, dirfd int, base string, s *drivers.ArchiveSpec) (*os.File, error) {
	name := tempName(base, "fetch")
	fd, err := unix.Openat(dirfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create download file: %w", err)
	}
	_ = unix.Unlinkat(dirfd, name, 0)
	f := os.NewFile(uintptr(fd), name)
	if err := d.download(ctx, f, s); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// download writes the source into f and checks its digest.
func (d *Driver) download(ctx context.Context, f *os.File, s *drivers.ArchiveSpec) error {
	// The whole fetch, local or remote, is bounded in time: a source that
	// trickles a byte a minute does not hold the apply for ever.
	ctx, cancel := context.WithTimeout(ctx, d.opts.FetchTimeout)
	defer cancel()
	src, size, err := d.open(ctx, s.Source)
	if err != nil {
		return err
	}
	defer src.Close()
	limit := d.opts.MaxBytes + int64(d.opts.MaxEntries)*1024
	tooBig := func() error {
		return fmt.Errorf("%w: fetch %s: more than %d bytes (Options.MaxBytes and 1 KiB an entry of Options.MaxEntries)", ErrLimit, s.Source, limit)
	}
	if size > limit {
		return tooBig()
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), &ctxReader{ctx: ctx, r: io.LimitReader(src, limit+1)})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("fetch %s: took longer than %s (Options.FetchTimeout): %w", s.Source, d.opts.FetchTimeout, ctx.Err())
		}
		return fmt.Errorf("fetch %s: %w", s.Source, ctxErr(ctx, err))
	}
	if n > limit {
		return tooBig()
	}
	// The digest of what was fetched is not said: it would make the
	// journal, and whoever reads it, an oracle for the digest of any file
	// a source can name.
	if got := digest(h); got != s.Digest {
		return fmt.Errorf("%w: %s: want %s, and the content fetched is not that; nothing unpacked", ErrDigestMismatch, s.Source, s.Digest)
	}
	return nil
}

func digest(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// open opens the source for reading; size is its length, -1 when unknown.
func (d *Driver) open(ctx context.Context, source string) (r io.ReadCloser, size int64, err error) {
	u, err := sourceURL(source)
	if err != nil {
		return nil, 0, err
	}
	if u.Scheme == "file" {
		// A local source is a file beneath the root, as every path a
		// declaration names is: file:///srv/app.tar is <root>/srv/app.tar.
		// It is opened non-blocking (a FIFO or a device cannot hold the
		// open, and the apply, for ever), through no symlink at the path
		// or in a parent, and only if it is a regular file.
		rc, st, err := d.root.Look(u.Path)
		if err != nil {
			return nil, 0, fmt.Errorf("fetch %s: %w", source, err)
		}
		if rc == nil {
			return nil, 0, fmt.Errorf("fetch %s: %s is %s, not a regular file beneath the root; nothing but a regular file is read",
				source, d.root.Host(u.Path), fileType(st.Mode))
		}
		return rc, st.Size, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, source, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch %s: %w", source, err)
	}
	resp, err := d.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch %s: %w", source, ctxErr(ctx, err))
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("fetch %s: %s", source, resp.Status)
	}
	return resp.Body, resp.ContentLength, nil
}

// fileType names what a mode says is at a path, for an error.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return "not a regular file"
}

// ctxErr is ctx's error when ctx is done, so that a cancelled fetch says
// so whatever the transport made of it, and err otherwise.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// ctxReader fails its reads once ctx is done, so that a copy from a slow or
// local source stops within one read of a cancellation.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// ctxReaderAt is ctxReader for io.ReaderAt.
type ctxReaderAt struct {
	ctx context.Context
	r   io.ReaderAt
}

func (c *ctxReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.ReadAt(p, off)
}
