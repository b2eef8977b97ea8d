package main

import (
	"bytes"
	"context"
	bin "encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	bolt "go.etcd.io/bbolt"
)

// newLivedHost is newDamageHost with a journal that has lived: applies of
// new revisions, each followed by drift and a check that repairs it.
func newLivedHost(t *testing.T) damageHost {
	t.Helper()
	h := newDamageHost(t)
	for i := range 6 {
		d := filepath.Join(h.dir, fmt.Sprintf("lived%d.yaml", i))
		body := fmt.Sprintf("mesh: m\nnode: n1\nrevision: %d\nresources:\n"+
			"  - directory: {path: /etc/app}\n"+
			"  - file: {path: /etc/app/app.conf, content: \"level = %d\\n\", mode: \"0644\"}\n"+
			"  - file: {path: /etc/motd, content: \"r%d\\n\", mode: \"0644\"}\n", i+3, i, i)
		if err := os.WriteFile(d, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		h.mustRun(t, "apply", d)
		if err := os.WriteFile(filepath.Join(h.root, "etc/motd"), []byte("drift\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		h.mustRun(t, "check")
	}
	// decl2 is revision 2: refused as old, but refused only after the
	// journal is opened, as a newer one would be.
	return h
}

// restoreCopy puts a copy of a journal in place at path as the recovery
// message says to: written beside it and renamed into place, a file of its
// own, which the damage mark of the one it replaces does not name.
func restoreCopy(path string, b []byte) error {
	if err := os.WriteFile(path+".restored", b, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".restored", path)
}

// damageCopy puts good back in place of the journal at path (as a copy
// restored is, renamed into place) and damages it as damage says, which
// must change something; it returns the damaged bytes.
func damageCopy(t *testing.T, path string, good []byte, damage func(t *testing.T, path string)) []byte {
	t.Helper()
	if err := restoreCopy(path, good); err != nil {
		t.Fatal(err)
	}
	damage(t, path)
	damaged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(damaged, good) {
		t.Fatal("the damage changed nothing")
	}
	return damaged
}

// exec runs mesh-host as a process of its own against the host's
// state, never through a service's socket: a damaged file can leave
// bbolt's lock held by the process that found it, as an exit lets go.
func (h damageHost) exec(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	global := []string{"--root", h.root, "--state-dir", h.state, "--socket", filepath.Join(h.dir, "no.sock")}
	cmd := exec.CommandContext(ctx, binary(t), append(global, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("mesh-host %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}

// zeroPage writes zeros over page n (from 0) of the file.
func zeroPage(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := int64(os.Getpagesize())
	if _, err := f.WriteAt(make([]byte, page), n*page); err != nil {
		t.Fatal(err)
	}
}

// pageInUse is page n of the file when bbolt uses it, else the first
// page after it that is used: zeros over a free page are not damage, and
// which pages are free varies from run to run (a record's time stamp
// varies in length).
func pageInUse(t *testing.T, path string, n int) int64 {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "copy.db")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(cp, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for ; ; n++ {
			info, err := tx.Page(n)
			if err != nil || info == nil {
				return fmt.Errorf("no page in use from %d: %v", n, err)
			}
			if info.Type != "free" {
				return nil
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return int64(n)
}

// freelistPage is the page bbolt's newest meta page names as its
// freelist: read by a writer's open, and by no reader's.
func freelistPage(t *testing.T, path string) int64 {
	t.Helper()
	freelist, _ := metaPages(t, path)
	return freelist
}

// metaPages is what bbolt's newest meta page says: the freelist's page,
// and how many pages the file uses (its high water mark).
func metaPages(t *testing.T, path string) (freelist, used int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	// Each meta page: a 16-byte page header, then magic, version,
	// page size, flags (4 bytes each), the root bucket (16), the
	// freelist's page, the high water mark and the txid (8 each).
	var txid uint64
	for _, at := range []int{0, page} {
		m := b[at+16:]
		if id := bin.LittleEndian.Uint64(m[48:]); id >= txid {
			freelist, used, txid = int64(bin.LittleEndian.Uint64(m[32:])), int64(bin.LittleEndian.Uint64(m[40:])), id
		}
	}
	return freelist, used
}

// TestDamageStopsEveryCommandAlike: on a lived journal damaged in any of
// these ways, every command, run in turn, stops with exitDamaged and the
// recovery message, and the file is left as it was. The first run is
// `journal --verify`, which reads everything, as the daily scrub does;
// what it finds stops the commands after it, whatever they read.
func TestDamageStopsEveryCommandAlike(t *testing.T) {
	h := newLivedHost(t)
	good, err := os.ReadFile(h.journal)
	if err != nil {
		t.Fatal(err)
	}
	rec := storedValue(t, h.journal, "records", string(bin.BigEndian.AppendUint64(nil, 2)))
	page := int64(os.Getpagesize())
	key := serverKey(t)
	damages := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"the fifth page zeroed", func(t *testing.T, path string) { zeroPage(t, path, pageInUse(t, path, 4)) }},
		{"the freelist's page zeroed", func(t *testing.T, path string) { zeroPage(t, path, freelistPage(t, path)) }},
		{"a record's bytes flipped", func(t *testing.T, path string) { flipAll(t, path, rec, len(rec)-3) }},
		{"the file truncated by whole pages", func(t *testing.T, path string) {
			// Below what its pages need: bbolt grows a file ahead of
			// what it uses, and what lies past that is no loss.
			_, used := metaPages(t, path)
			if err := os.Truncate(path, used*page-2*page); err != nil {
				t.Fatal(err)
			}
		}},
		{"the file truncated mid-page", func(t *testing.T, path string) {
			if err := os.Truncate(path, int64(len(good))-page/2); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			damaged := damageCopy(t, h.journal, good, d.damage)
			commands := append([][]string{{"journal", "--verify", "--key", key}}, h.damageCommands()...)
			var codes []string
			for _, args := range commands {
				name := strings.Join(args, " ")
				// journal --follow and serve would run on a journal they
				// took for whole: the deadline says they did.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				code, stdout, stderr := h.exec(t, ctx, args...)
				cancel()
				codes = append(codes, fmt.Sprintf("%s=%d", name, code))
				if code != exitDamaged {
					t.Errorf("%s: exit %d, want %d (damaged)\nstdout:\n%s\nstderr:\n%s", name, code, exitDamaged, stdout, stderr)
					continue
				}
				for _, want := range []string{"journal is corrupt: " + h.journal, "To recover: stop mesh-host, move the file aside (mv " + h.journal} {
					if !strings.Contains(stderr, want) {
						t.Errorf("%s: stderr does not say %q:\n%s", name, want, stderr)
					}
				}
				if after, _ := os.ReadFile(h.journal); !bytes.Equal(after, damaged) {
					t.Fatalf("%s changed the damaged file", name)
				}
			}
			t.Logf("exit codes: %s", strings.Join(codes, " "))
		})
	}
}

// wantDamageStop fails unless a command's exit and stderr are a stop on
// the damage of the journal at path, found before (its mark).
func wantDamageStop(t *testing.T, name string, code int, stderr, path string, also ...string) {
	t.Helper()
	if code != exitDamaged {
		t.Errorf("%s: exit %d, want %d (damaged):\n%s", name, code, exitDamaged, stderr)
		return
	}
	for _, want := range append([]string{"journal is corrupt: " + path, "To recover: stop mesh-host, move the file aside (mv " + path, path + ".damaged marks this file"}, also...) {
		if !strings.Contains(stderr, want) {
			t.Errorf("%s: stderr does not say %q:\n%s", name, want, stderr)
		}
	}
}

// TestDamageMark: a command that finds damage leaves a mark beside the
// journal (owner-only, saying what was found); every command honours it
// before reading the file, so that even the file put back as it was, in
// place, stops them; moving the file aside, as the recovery message says,
// lets the host start again, and a copy restored and renamed into place
// does too.
func TestDamageMark(t *testing.T) {
	h := newLivedHost(t)
	mark := h.journal + ".damaged"
	good, err := os.ReadFile(h.journal)
	if err != nil {
		t.Fatal(err)
	}
	rec := storedValue(t, h.journal, "records", string(bin.BigEndian.AppendUint64(nil, 2)))
	flipAll(t, h.journal, rec, len(rec)-3)

	// replay reads record 2: it finds the damage, and marks the file.
	code, _, stderr := h.exec(t, context.Background(), "replay")
	if code != exitDamaged || !strings.Contains(stderr, "record 2") {
		t.Fatalf("replay on a damaged record: exit %d, want %d naming record 2:\n%s", code, exitDamaged, stderr)
	}
	fi, err := os.Lstat(mark)
	if err != nil {
		t.Fatalf("no damage mark after replay found damage: %v", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("the mark is %s, want a regular file, 0600", fi.Mode())
	}
	if b, _ := os.ReadFile(mark); !strings.Contains(string(b), "record 2") {
		t.Errorf("the mark does not say what was found:\n%s", b)
	}

	// The file as it was, written in place: the mark names this file, and
	// every command stops on it without reading a page.
	if err := os.WriteFile(h.journal, good, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range append(h.damageCommands(), []string{"journal", "--kind", "host.started"}) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code, _, stderr := h.exec(t, ctx, args...)
		cancel()
		wantDamageStop(t, strings.Join(args, " "), code, stderr, h.journal, "damage was found in it before", "record 2")
		if after, _ := os.ReadFile(h.journal); !bytes.Equal(after, good) {
			t.Fatalf("%s changed the marked file", strings.Join(args, " "))
		}
	}

	// A copy restored beside it and renamed into place is another file.
	if err := restoreCopy(h.journal, good); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := h.exec(t, context.Background(), "status"); code != 0 {
		t.Fatalf("status on a restored copy: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := h.exec(t, context.Background(), "check"); code != 0 {
		t.Fatalf("check on a restored copy: exit %d\n%s%s", code, out, errs)
	}
	if _, err := os.Lstat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale mark is still there after a writer opened the restored copy: %v", err)
	}

	// Damage again; then the recovery the message gives: the file moved
	// aside, and the host starts again from its next declaration.
	flipAll(t, h.journal, rec, len(rec)-3)
	if code, _, stderr := h.exec(t, context.Background(), "journal", "--verify", "--key", serverKey(t)); code != exitDamaged {
		t.Fatalf("journal --verify on a damaged record: exit %d\n%s", code, stderr)
	}
	if _, err := os.Lstat(mark); err != nil {
		t.Fatalf("no mark after journal --verify found damage: %v", err)
	}
	if err := os.Rename(h.journal, h.journal+".broken"); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := h.exec(t, context.Background(), "apply", h.decl); code != 0 {
		t.Fatalf("apply after the journal was moved aside: exit %d\n%s%s", code, out, errs)
	}
	for _, args := range [][]string{{"status"}, {"check"}, {"journal"}, {"replay", "--verify"}} {
		if code, out, errs := h.exec(t, context.Background(), args...); code != 0 {
			t.Errorf("%s on the new journal: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
	}
	if _, err := os.Lstat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mark of the file moved aside is still there: %v", err)
	}
}

// TestDamageMarkItself: a mark that cannot be read for what it says (a
// symbolic link, which is never followed, not a regular file, or without
// the file it names) stops every command as damage.
func TestDamageMarkItself(t *testing.T) {
	h := newDamageHost(t)
	mark := h.journal + ".damaged"
	good := filepath.Join(h.dir, "good-mark")
	if err := os.WriteFile(good, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	marks := []struct {
		name, says string
		make       func() error
	}{
		{"a symbolic link", "is a symbolic link", func() error { return os.Symlink(good, mark) }},
		{"a directory", "is not a regular file", func() error { return os.Mkdir(mark, 0o700) }},
		{"garbage", "does not say which file it is for", func() error { return os.WriteFile(mark, []byte("\x00\x01 not a mark\n"), 0o600) }},
	}
	for _, m := range marks {
		t.Run(m.name, func(t *testing.T) {
			if err := m.make(); err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(mark)
			for _, args := range [][]string{{"status"}, {"journal"}, {"check"}, {"apply", h.decl2}} {
				code, _, stderr := h.exec(t, context.Background(), args...)
				wantDamageStop(t, strings.Join(args, " "), code, stderr, h.journal, m.says)
			}
			if fi, err := os.Lstat(mark); err != nil || (m.name == "a symbolic link") != (fi.Mode()&os.ModeSymlink != 0) {
				t.Errorf("the mark was changed: %v %v", fi, err)
			}
		})
	}
}

// TestDamageMarkFromTheService: damage the running service finds, for a
// command a client asked it (status reads the projection), stops it and
// leaves the mark; then every command, forwarded to no service now, stops
// on the mark, even one that reads nothing of what was damaged.
func TestDamageMarkFromTheService(t *testing.T) {
	h := newLivedHost(t)
	owned := storedValue(t, h.journal, "projection", "owned/file:/etc/app/app.conf")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	done := h.startServe(t, ctx, &stderr)
	if flipEvery(t, h.journal, owned, 1) == 0 {
		t.Fatal("the owned value is not in the file")
	}
	code, _, errs := h.ask(t, "status", "--owned")
	wantDamageStop(t, "status through the service", code, errs, h.journal)
	checkStoppedOnDamage(t, done, &stderr, h.journal)
	if _, err := os.Lstat(h.journal + ".damaged"); err != nil {
		t.Fatalf("the service left no mark: %v", err)
	}
	for _, args := range [][]string{{"journal", "--kind", "host.started"}, {"journal", "--why", "file:/etc/motd"}, {"replay", "--until", "2"}, {"check"}, {"serve", "--drift-interval", "1h"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code, _, stderr := h.exec(t, ctx, args...)
		cancel()
		wantDamageStop(t, strings.Join(args, " "), code, stderr, h.journal, "damage was found in it before")
	}
}

func serverKey(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	key, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestCommandsReadWhatTheyNeed: no command reads the whole journal before
// it answers (that is the scrub's, and journal --verify's): with an old
// record damaged and not yet found, status and a listing of later records
// answer, as nothing they read is damaged. A command that reads the record
// finds it and marks the file; from then on every command stops.
func TestCommandsReadWhatTheyNeed(t *testing.T) {
	h := newLivedHost(t)
	rec := storedValue(t, h.journal, "records", string(bin.BigEndian.AppendUint64(nil, 2)))
	flipAll(t, h.journal, rec, len(rec)-3)
	for _, args := range [][]string{{"status", "--owned"}, {"journal", "--since", "10"}, {"journal", "--why", "file:/etc/motd"}} {
		if code, out, errs := h.exec(t, context.Background(), args...); code != 0 {
			t.Errorf("%s, which reads nothing damaged: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
	}
	code, _, stderr := h.exec(t, context.Background(), "journal")
	if code != exitDamaged || !strings.Contains(stderr, "record 2") {
		t.Fatalf("journal, which reads record 2: exit %d\n%s", code, stderr)
	}
	code, _, stderr = h.exec(t, context.Background(), "status")
	wantDamageStop(t, "status once the damage was found", code, stderr, h.journal, "damage was found in it before")
}
