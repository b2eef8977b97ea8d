// Package archive is the archive resource kind: a tar, tar.gz, tar.zst or
// zip archive fetched from an http, https or file URL, checked against its
// sha256 digest, and unpacked at a destination directory that appears whole
// or not at all. The destination is a plain path: the declaration package
// has expanded any "${version}" in it before the driver sees the spec.
//
// # Apply
//
// Apply fetches the archive into a nameless temporary file in the
// destination's parent directory (created there, then unlinked at once, so
// nothing is left behind whatever happens), and checks its sha256 before a
// single entry is read. It unpacks into a private staging directory beside
// the destination, writes the digest marker there, flushes the filesystem,
// and renames the staging directory into place. An existing destination is
// swapped with the staging directory in one step (renameat2
// RENAME_EXCHANGE on Linux), so a reader sees the old tree or the new, and
// the old tree is then removed; where the exchange is not available (other
// systems, some filesystems) the old tree is renamed aside first, which
// leaves a moment with nothing at the destination. The destination's
// parent must exist: the archive owns the destination, not the directories
// above it.
//
// A refused or broken archive changes nothing at the destination and leaves
// no staging directory behind. Leftovers of a process that died mid-way
// (".NAME.mesh-host-stage-…", "-old-…", "-fetch-…" beside the destination)
// are removed by the next Apply or Remove of that destination.
//
// Unpacking refuses absolute names, ".." components, backslashes, symlinks,
// hard links, devices, fifos, sockets, setuid and setgid bits, names the
// driver reserves (".mesh-host-*" at the top), and an entry whose parent is
// not a directory, and it stops at Options.MaxBytes unpacked bytes and
// Options.MaxEntries entries; each error names the entry. Files and
// directories are created by the host's own user, whatever owner the
// archive names; their modes are the archive's less group and other write
// (a directory always keeps rwx for its owner); files keep the archive's
// modification time.
//
// # Observe
//
// A destination is in sync when it is a directory holding a
// ".mesh-host-digest" file equal to the spec's digest and an arrival marker.
// A symlink or other non-directory at the destination differs in "type"
// and is never followed; another digest, or none, differs in "content".
//
// Drift inside the tree is not observed: a file edited, added or removed
// under the destination after it arrived goes unnoticed. Hashing every file
// on each observe costs as much as the archive is large, and a manifest of
// sizes and modification times would be cheap but both wrong ways round:
// an edit that keeps size and time passes, and a program that writes into
// its own tree (caches, logs) would be "repaired" by having its tree
// replaced. To force a fresh unpack, delete the ".mesh-host-digest" file:
// Observe then reports "content" and Apply replaces the tree.
//
// # Arrival
//
// The upgrade design calls the version directory that arrived last the
// newest. After renaming a tree into place, Apply writes
// ".mesh-host-arrived" inside it: one line, the arrival time in RFC 3339
// UTC with nine fraction digits, a space, and a decimal counter, e.g.
//
//	2026-11-25T10:04:05.123456789Z 7
//
// The counter is one more than the greatest counter in the arrival markers
// of the destination's sibling directories, so among the directories of one
// parent the greatest counter is the one that arrived last even when the
// clock has stepped back; the time is for people. A directory in place
// without the marker (the host stopped between the rename and the write)
// differs in "arrival", and Apply then writes the marker without fetching.
//
// One Driver manages a root at a time.
package archive

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Errors of the archive driver.
var (
	// ErrDigestMismatch is returned when the fetched archive's sha256 is
	// not the spec's digest; the error names both. Nothing is unpacked.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrUnsafeEntry is returned for an archive entry the driver will not
	// unpack (absolute, "..", symlink, hard link, device, fifo, setuid,
	// …); the error names the entry and why.
	ErrUnsafeEntry = errors.New("unsafe archive entry")
	// ErrLimit is returned when a download or an archive would exceed
	// Options.MaxBytes or Options.MaxEntries; the error names the entry
	// and the limit.
	ErrLimit = errors.New("archive over limit")
	// ErrCorrupt is returned when an archive cannot be read as its format.
	ErrCorrupt = errors.New("corrupt archive")
	// ErrNoParent is returned by Apply when the destination's parent
	// directory does not exist (drivers.ErrNoParent).
	ErrNoParent = drivers.ErrNoParent
)

// Names the driver keeps inside a destination directory.
const (
	// DigestFile holds the digest of the archive unpacked there.
	DigestFile = ".mesh-host-digest"
	// ArrivedFile holds the arrival time and counter (see the package doc).
	ArrivedFile = ".mesh-host-arrived"
)

// Defaults of Options.
const (
	DefaultMaxBytes     = 1 << 30
	DefaultMaxEntries   = 100_000
	DefaultHTTPTimeout  = 15 * time.Minute
	DefaultFetchTimeout = DefaultHTTPTimeout
)

// Options tune a Driver; a zero field takes its default.
type Options struct {
	// MaxBytes caps the bytes an archive unpacks to (DefaultMaxBytes). A
	// download may be larger by 1 KiB an entry, room for the archive's own
	// headers.
	MaxBytes int64
	// MaxEntries caps the entries an archive holds (DefaultMaxEntries).
	MaxEntries int
	// HTTPClient fetches http and https sources; the default has a
	// DefaultHTTPTimeout timeout.
	HTTPClient *http.Client
	// FetchTimeout bounds a whole fetch, local or remote, from open to
	// the last byte (DefaultFetchTimeout).
	FetchTimeout time.Duration
	// Now is the clock of arrival markers (time.Now).
	Now func() time.Time
}

// Driver manages archive resources under a root prefix.
type Driver struct {
	root  *rootfs.Root
	opts  Options
	locks pathLocks
	// arrival serialises the read-greatest-counter-then-write of arrival
	// markers.
	arrival sync.Mutex
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Nested = (*Driver)(nil)
)

// PathOf is the directory the archive is unpacked into
// (drivers.Located); empty for a spec that is not an archive's.
func (d *Driver) PathOf(spec drivers.Spec) string {
	if s, ok := spec.(*drivers.ArchiveSpec); ok {
		return s.Path
	}
	return ""
}

// IsDirectory is true: others may be declared in the directory the
// archive is unpacked into (drivers.Nested).
func (d *Driver) IsDirectory(drivers.Spec) bool { return true }

// New returns the archive driver for root.
func New(root *rootfs.Root, opts Options) *Driver {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	// Far beyond any disk, and no sum of them overflows.
	opts.MaxBytes = min(opts.MaxBytes, math.MaxInt64/4)
	opts.MaxEntries = min(opts.MaxEntries, math.MaxInt32)
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Driver{root: root, opts: opts}
}

// Observe reports how the destination stands against spec; it changes
// nothing.
func (d *Driver) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	if err := ctx.Err(); err != nil {
		return drivers.Observation{}, fmt.Errorf("observe archive: %w", err)
	}
	s, err := check(spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	dir, base, err := d.openParent(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return drivers.Observation{Differs: []string{"absent"}}, nil
	}
	if err != nil {
		return drivers.Observation{}, fmt.Errorf("observe archive %s: %w", s.Path, err)
	}
	defer dir.Close()
	f, err := inspect(int(dir.Fd()), base)
	if err != nil {
		return drivers.Observation{}, fmt.Errorf("observe archive %s: %w", s.Path, err)
	}
	return f.observation(s.Digest), nil
}

// Apply fetches, checks and unpacks the archive unless the destination
// already holds it.
func (d *Driver) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("apply archive: %w", err)
	}
	s, err := check(spec)
	if err != nil {
		return "", err
	}
	unlock, err := d.locks.lock(ctx, s.Path)
	if err != nil {
		return "", fmt.Errorf("apply archive %s: %w", s.Path, err)
	}
	defer unlock()
	dir, base, err := d.openParent(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("apply archive %s: %w: %w", s.Path, ErrNoParent, err)
	}
	if err != nil {
		return "", fmt.Errorf("apply archive %s: parent directory: %w", s.Path, err)
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	sweep(dfd, base)
	f, err := inspect(dfd, base)
	if err != nil {
		return "", fmt.Errorf("apply archive %s: %w", s.Path, err)
	}
	if f.kind == foundDir && f.digest == s.Digest {
		if f.arrived {
			return drivers.Unchanged, nil
		}
		if err := d.markArrival(dfd, base); err != nil {
			return "", fmt.Errorf("apply archive %s: %w", s.Path, err)
		}
		return drivers.Updated, nil
	}
	if err := d.replace(ctx, dir, base, s); err != nil {
		return "", fmt.Errorf("apply archive %s: %w", s.Path, err)
	}
	if f.kind == foundAbsent {
		return drivers.Created, nil
	}
	return drivers.Updated, nil
}

// Remove removes the destination tree, which the host owns wholesale,
// without following any symlink in it. An absent destination is success.
func (d *Driver) Remove(ctx context.Context, spec drivers.Spec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remove archive: %w", err)
	}
	// Only the path: the host removes what a declaration no longer names
	// with drivers.SpecForRemoval, which carries nothing else.
	s, ok := spec.(*drivers.ArchiveSpec)
	if !ok || s == nil {
		return fmt.Errorf("remove archive: %w: %T", drivers.ErrWrongKind, spec)
	}
	if err := drivers.CheckPath(s.Path); err != nil {
		return fmt.Errorf("remove archive %s: %w", s.Path, err)
	}
	unlock, err := d.locks.lock(ctx, s.Path)
	if err != nil {
		return fmt.Errorf("remove archive %s: %w", s.Path, err)
	}
	defer unlock()
	dir, base, err := d.openParent(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove archive %s: %w", s.Path, err)
	}
	defer dir.Close()
	if err := remove(ctx, dir, base); err != nil {
		return fmt.Errorf("remove archive %s: %w", s.Path, err)
	}
	return nil
}

// check returns spec as an archive spec, or says why it is not one the
// driver can apply.
func check(spec drivers.Spec) (*drivers.ArchiveSpec, error) {
	s, ok := spec.(*drivers.ArchiveSpec)
	if !ok {
		kind := drivers.Kind("nil")
		if spec != nil {
			kind = spec.Kind()
		}
		return nil, fmt.Errorf("archive driver: %w: %s", drivers.ErrWrongKind, kind)
	}
	if s == nil {
		return nil, fmt.Errorf("archive driver: %w: nil spec", drivers.ErrInvalidSpec)
	}
	if err := drivers.CheckPath(s.Path); err != nil {
		return nil, fmt.Errorf("archive %s: %w", s.Path, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("archive %s: %w: %s", s.Path, drivers.ErrInvalidSpec, fmt.Sprintf(format, args...))
	}
	hexDigits, ok := strings.CutPrefix(s.Digest, "sha256:")
	if !ok || len(hexDigits) != 64 || strings.Trim(hexDigits, "0123456789abcdef") != "" {
		return nil, bad("digest %q is not \"sha256:\" and 64 lower-case hex digits", s.Digest)
	}
	switch s.Format {
	case drivers.FormatTar, drivers.FormatTarGz, drivers.FormatTarZst, drivers.FormatZip:
	default:
		return nil, bad("format %q is not tar, tar.gz, tar.zst or zip", s.Format)
	}
	if _, err := sourceURL(s.Source); err != nil {
		return nil, bad("%v", err)
	}
	return s, nil
}

// sourceURL parses an http, https or file URL.
func sourceURL(src string) (*url.URL, error) {
	u, err := url.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("source: %v", err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("source %q has no host", src)
		}
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("source %q: a file URL names a file on this host", src)
		}
		if u.Path == "" || u.Path[0] != '/' {
			return nil, fmt.Errorf("source %q: a file URL's path is absolute", src)
		}
		// The path is beneath the root, and so as clean as any other.
		if err := drivers.CheckPath(u.Path); err != nil {
			return nil, fmt.Errorf("source %q: %w", src, err)
		}
	default:
		return nil, fmt.Errorf("source %q is not an http, https or file URL", src)
	}
	return u, nil
}

// openParent opens p's parent directory beneath the root and returns it
// with p's last component.
func (d *Driver) openParent(p string) (*os.File, string, error) {
	dir, err := d.root.OpenDir(path.Dir(p))
	if err != nil {
		return nil, "", err
	}
	return dir, path.Base(p), nil
}

// pathLocks serialises the Apply and Remove calls of one destination: the
// leftover sweep of one would otherwise take another's staging directory.
type pathLocks struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (l *pathLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]chan struct{})
	}
	ch, ok := l.m[key]
	if !ok {
		ch = make(chan struct{}, 1)
		l.m[key] = ch
	}
	l.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
