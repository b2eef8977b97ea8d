package account

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// The files, as paths beneath the root.
const (
	passwdPath  = "/etc/passwd"
	shadowPath  = "/etc/shadow"
	groupPath   = "/etc/group"
	gshadowPath = "/etc/gshadow"
	lockPath    = "/etc/.pwd.lock"
)

// The fields of a line: passwd's, shadow's, and group's and gshadow's.
const (
	passwdFields = 7
	shadowFields = 9
	groupFields  = 4
)

// table is one of the four files as read: its lines in order, each with
// its newline (the last may have none), kept byte for byte until the
// driver changes it.
type table struct {
	path   string
	exists bool
	mode   drivers.Mode
	uid    int
	gid    int
	lines  []string
	orig   []byte
}

// readTable reads the file p beneath the root; a missing file is an
// empty table. A symlink at p (or at /etc) is drivers.ErrUnsafePath.
func readTable(root *rootfs.Root, p string) (*table, error) {
	t := &table{path: p}
	f, err := root.OpenFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("stat %s: no owner", p)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	t.exists, t.orig = true, b
	t.mode, t.uid, t.gid = drivers.Mode(st.Mode&0o7777), int(st.Uid), int(st.Gid)
	for line := range bytes.Lines(b) {
		t.lines = append(t.lines, string(line))
	}
	return t, nil
}

// local reports whether line i is a record of the local database: not a
// comment, a blank line, or a NIS "+"/"-" line, which name accounts kept
// elsewhere.
func (t *table) local(i int) bool {
	l := t.lines[i]
	return l != "" && !strings.ContainsRune("#+-\n", rune(l[0])) && strings.Contains(l, ":")
}

// fields is line i split at its colons, without its newline.
func (t *table) fields(i int) []string {
	return strings.Split(strings.TrimSuffix(t.lines[i], "\n"), ":")
}

// find returns the index of name's first line, as getpwnam(3) finds it,
// or -1.
func (t *table) find(name string) int {
	for i, l := range t.lines {
		if n, _, ok := strings.Cut(l, ":"); ok && n == name && t.local(i) {
			return i
		}
	}
	return -1
}

// set makes line i the fields f, keeping its newline; i -1 appends f as a
// new line.
func (t *table) set(i int, f []string) {
	line := strings.Join(f, ":")
	if i < 0 {
		if n := len(t.lines); n > 0 && !strings.HasSuffix(t.lines[n-1], "\n") {
			t.lines[n-1] += "\n"
		}
		t.lines = append(t.lines, line+"\n")
		return
	}
	if strings.HasSuffix(t.lines[i], "\n") {
		line += "\n"
	}
	t.lines[i] = line
}

// remove removes line i.
func (t *table) remove(i int) { t.lines = slices.Delete(t.lines, i, i+1) }

func (t *table) bytes() []byte { return []byte(strings.Join(t.lines, "")) }

// changed reports whether the table is no longer the file as read.
func (t *table) changed() bool {
	if !t.exists {
		return len(t.lines) > 0
	}
	return !bytes.Equal(t.bytes(), t.orig)
}

// ids maps every id in field n of the local lines to the first name that
// holds it; lines whose field is not a number hold none.
func (t *table) ids(n int) map[int]string {
	out := map[int]string{}
	for i := range t.lines {
		if !t.local(i) {
			continue
		}
		f := t.fields(i)
		if len(f) <= n {
			continue
		}
		id, err := strconv.Atoi(f[n])
		if err != nil {
			continue
		}
		if _, ok := out[id]; !ok {
			out[id] = f[0]
		}
	}
	return out
}

// record returns name's line and its fields, which must number want; -1
// and no error when name has no line.
func (t *table) record(name string, want int) (int, []string, error) {
	i := t.find(name)
	if i < 0 {
		return -1, nil, nil
	}
	f := t.fields(i)
	if len(f) != want {
		return -1, nil, fmt.Errorf("%w: the line of %s in %s has %d fields, want %d", ErrMalformed, name, t.path, len(f), want)
	}
	return i, f, nil
}

// id parses field n of name's fields f.
func (t *table) id(f []string, n int) (int, error) {
	id, err := strconv.Atoi(f[n])
	if err != nil || id < 0 {
		return 0, fmt.Errorf("%w: %s gives %s the id %q", ErrMalformed, t.path, f[0], f[n])
	}
	return id, nil
}

// members splits a member list ("a,b,c").
func members(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// setMember puts user in field n of line i (a member or administrator
// list), or takes every mention of it out, as in says.
func (t *table) setMember(i, n int, user string, in bool) {
	f := t.fields(i)
	if len(f) <= n {
		return
	}
	ms := members(f[n])
	switch has := slices.Contains(ms, user); {
	case in && !has:
		ms = append(ms, user)
	case !in && has:
		ms = slices.DeleteFunc(ms, func(m string) bool { return m == user })
	default:
		return
	}
	f[n] = strings.Join(ms, ",")
	t.set(i, f)
}

// db is the root's four files, as read by one call.
type db struct {
	passwd, shadow, group, gshadow *table
}

func readDB(root *rootfs.Root) (*db, error) {
	var d db
	for _, f := range []struct {
		t **table
		p string
	}{{&d.passwd, passwdPath}, {&d.shadow, shadowPath}, {&d.group, groupPath}, {&d.gshadow, gshadowPath}} {
		t, err := readTable(root, f.p)
		if err != nil {
			return nil, err
		}
		*f.t = t
	}
	return &d, nil
}

// changed reports whether any file is no longer as read.
func (d *db) changed() bool {
	return d.passwd.changed() || d.shadow.changed() || d.group.changed() || d.gshadow.changed()
}

// Write orders (see the package doc): what an account stands on before
// the line that names it when it is made, after when it is removed.
func (d *db) madeOrder() []*table    { return []*table{d.gshadow, d.group, d.shadow, d.passwd} }
func (d *db) removedOrder() []*table { return []*table{d.passwd, d.shadow, d.group, d.gshadow} }

// write writes each changed table of order, in order, whole and renamed
// into place, durable before the next. A file that was missing is made
// with the mode and owner shadow-utils gives it.
func (d *db) write(root *rootfs.Root, order []*table) error {
	for _, t := range order {
		if !t.changed() {
			continue
		}
		opts := rootfs.WriteOptions{Mode: t.mode, UID: t.uid, GID: t.gid, Sync: true}
		if !t.exists {
			opts = d.newFileOptions(t)
		}
		err := root.WriteFile(t.path, t.bytes(), opts)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("write %s: %w: %w", t.path, drivers.NoParent(drivers.KindFile, t.path), err)
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", t.path, err)
		}
	}
	return nil
}

// newFileOptions are a new file's mode and owner: passwd and group
// readable by all; shadow and gshadow by their group shadow where the
// root has one (Debian), else by their owner alone. The owner is the
// host's own, root on a node.
func (d *db) newFileOptions(t *table) rootfs.WriteOptions {
	opts := rootfs.WriteOptions{Mode: 0o644, UID: -1, GID: -1, Sync: true}
	if t == d.shadow || t == d.gshadow {
		opts.Mode = 0o600
		if i, f, err := d.group.record("shadow", groupFields); err == nil && i >= 0 {
			if gid, err := d.group.id(f, 2); err == nil {
				opts.Mode, opts.GID = 0o640, gid
			}
		}
	}
	return opts
}
