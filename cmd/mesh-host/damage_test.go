package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// damageHost is a host with a journal worth damaging: a declaration
// applied (desired state, owned resources), a refusal, drift repaired.
type damageHost struct {
	dir, root, state, journal string
	decl, decl2, bad          string
}

func newDamageHost(t *testing.T) damageHost {
	t.Helper()
	dir := t.TempDir()
	h := damageHost{
		dir: dir, root: filepath.Join(dir, "root"), state: filepath.Join(dir, "state"),
		decl: filepath.Join(dir, "decl.yaml"), decl2: filepath.Join(dir, "decl2.yaml"), bad: filepath.Join(dir, "bad.yaml"),
	}
	h.journal = filepath.Join(h.state, "journal.db")
	if err := os.MkdirAll(filepath.Join(h.root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	const decl = "mesh: m\nnode: n1\nrevision: %d\nresources:\n" +
		"  - directory: {path: /etc/app}\n" +
		"  - file: {path: /etc/app/app.conf, content: \"level = %d\\n\", mode: \"0644\"}\n" +
		"  - file: {path: /etc/motd, content: \"hello\\n\", mode: \"0644\"}\n"
	for path, body := range map[string]string{h.decl: fmt.Sprintf(decl, 1, 1), h.decl2: fmt.Sprintf(decl, 2, 2), h.bad: "mesh: m\nnode: [\n"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.mustRun(t, "apply", h.decl)
	if err := os.WriteFile(filepath.Join(h.root, "etc/motd"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.mustRun(t, "check")
	if code, _, _ := h.run(t, context.Background(), "apply", h.bad); code != command.ExitRefused {
		t.Fatalf("apply of a bad declaration: exit %d, want %d", code, command.ExitRefused)
	}
	return h
}

// run runs mesh-host in this process against the host's state, never
// through a service's socket.
func (h damageHost) run(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	global := []string{"--root", h.root, "--state-dir", h.state, "--socket", filepath.Join(h.dir, "no.sock")}
	code = runCLI(ctx, append(global, args...), &out, &errb, nil)
	return code, out.String(), errb.String()
}

func (h damageHost) mustRun(t *testing.T, args ...string) {
	t.Helper()
	if code, out, errs := h.run(t, context.Background(), args...); code != command.ExitOK {
		t.Fatalf("mesh-host %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
}

// damageCommands is every command that opens the journal (main.go's
// grammar: all but enrol and version), in the forms that read it
// differently. The first reads the whole file, as the scrub does: a
// command reads only what it needs, and damage in what it does not read
// stops it once something has found it (the file's damage mark).
func (h damageHost) damageCommands() [][]string {
	return [][]string{
		{"journal", "--verify", "--key", "none"},
		{"status"},
		{"status", "--json", "--owned"},
		{"plan", h.decl2},
		{"apply", h.decl2},
		{"apply", h.bad}, // a refusal is journaled too: not on a damaged file
		{"check"},
		{"check", "--no-repair"},
		{"journal"},
		{"journal", "--json", "--since", "2"},
		{"journal", "--kind", "resource.applied"},
		{"journal", "--resource", "file:/etc/motd"},
		{"journal", "--why", "file:/etc/motd"},
		{"journal", "--follow"},
		{"replay"},
		{"replay", "--until", "2"},
		{"replay", "--verify"},
		{"serve", "--drift-interval", "1h"},
	}
}

// flipAll flips one bit of the byte at off in every copy of value in the
// file (bbolt's copy-on-write leaves stale copies in free pages, so the
// first need not be the live one), without truncating it.
func flipAll(t *testing.T, path string, value []byte, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for i := 0; ; {
		k := bytes.Index(b[i:], value)
		if k < 0 {
			break
		}
		at := int64(i + k + off)
		if _, err := f.WriteAt([]byte{b[at] ^ 0x04}, at); err != nil {
			t.Fatal(err)
		}
		n++
		i += k + 1
	}
	if n == 0 {
		t.Fatalf("the value to damage (%d bytes) is not in %s", len(value), path)
	}
}

// storedValue reads the raw value of key in a bucket of the journal file.
func storedValue(t *testing.T, path, bucket, key string) []byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	_ = db.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket([]byte(bucket)).Get([]byte(key)))
		return nil
	})
	if v == nil {
		t.Fatalf("%s has no %s/%s", path, bucket, key)
	}
	return v
}

// TestDamageStopsEveryCommand: on a journal with a byte flipped in a
// record, or in any value of the stored projection, or emptied, every
// command that opens it stops with the recovery message and exitDamaged,
// and leaves the file exactly as it was: nothing is appended to it, and
// nothing is reported from it.
func TestDamageStopsEveryCommand(t *testing.T) {
	h := newDamageHost(t)
	good, err := os.ReadFile(h.journal)
	if err != nil {
		t.Fatal(err)
	}
	// What each damage is done to.
	j, err := journal.Open(h.journal, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := j.Get(2)
	j.Close()
	if err != nil || !ok {
		t.Fatalf("record 2: %v %v", ok, err)
	}
	record := event.Encode(rec)
	damages := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"a byte flipped in a record", func(t *testing.T, path string) { flipAll(t, path, record, len(record)-3) }},
		{"a byte flipped in the projection's core", func(t *testing.T, path string) {
			v := storedValue(t, path, "projection", "core")
			flipAll(t, path, v, len(v)/2)
		}},
		{"a byte flipped in the projection's desired state", func(t *testing.T, path string) {
			v := storedValue(t, path, "projection", "desired")
			flipAll(t, path, v, len(v)/2)
		}},
		{"a byte flipped in an owned resource", func(t *testing.T, path string) {
			v := storedValue(t, path, "projection", "owned/file:/etc/app/app.conf")
			flipAll(t, path, v, 1)
		}},
		{"the file emptied", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			damaged := damageCopy(t, h.journal, good, d.damage)
			for _, args := range h.damageCommands() {
				name := strings.Join(args, " ")
				// journal --follow and serve would run on a journal
				// they took for whole: the deadline says they did.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				code, stdout, stderr := h.run(t, ctx, args...)
				cancel()
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
				if _, err := os.Stat(filepath.Join(h.state, "control.sock")); err == nil {
					t.Errorf("%s left a socket: a service started", name)
				}
			}
		})
	}
	// The same commands on the undamaged journal do not stop so: the
	// exits above are the damage's.
	t.Run("undamaged", func(t *testing.T) {
		for _, args := range h.damageCommands() {
			if err := restoreCopy(h.journal, good); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			code, stdout, stderr := h.run(t, ctx, args...)
			cancel()
			if code == exitDamaged || strings.Contains(stderr, "corrupt") {
				t.Errorf("%s on the undamaged journal: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
			}
		}
	})
}

// lockedBuffer is a bytes.Buffer a service and a test may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// flipEvery is flipAll that may find no copy left to flip.
func flipEvery(t *testing.T, path string, value []byte, off int) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for i := 0; ; i++ {
		k := bytes.Index(b[i:], value)
		if k < 0 {
			return n
		}
		i += k
		if _, err := f.WriteAt([]byte{b[i+off] ^ 0x04}, int64(i+off)); err != nil {
			t.Fatal(err)
		}
		n++
	}
}

// startServe runs `serve` in this process and waits for its socket. The
// returned channel gives its exit code.
func (h damageHost) startServe(t *testing.T, ctx context.Context, stderr *lockedBuffer, args ...string) <-chan int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		done <- runCLI(ctx, append([]string{"--root", h.root, "--state-dir", h.state, "serve", "--drift-interval", "1h"}, args...), io.Discard, stderr, nil)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", filepath.Join(h.state, "control.sock")); err == nil {
			c.Close()
			return done
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before it answered:\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer on its socket:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ask runs a command through the running service's socket.
func (h damageHost) ask(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runCLI(context.Background(), append([]string{"--root", h.root, "--state-dir", h.state}, args...), &out, &errb, nil)
	return code, out.String(), errb.String()
}

// checkStoppedOnDamage waits for a service's exit and checks it was the
// stop on damage.
func checkStoppedOnDamage(t *testing.T, done <-chan int, stderr *lockedBuffer, journalPath string) {
	t.Helper()
	select {
	case code := <-done:
		if code != exitDamaged {
			t.Fatalf("serve exited %d, want %d (damaged):\n%s", code, exitDamaged, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve still runs on a damaged journal:\n%s", stderr.String())
	}
	for _, want := range []string{`msg="the journal is damaged; stopping"`, "journal is corrupt: " + journalPath, "To recover: stop mesh-host"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("serve's log does not say %q:\n%s", want, stderr.String())
		}
	}
}

// TestServeScrubs: the scrub journals what it found on a whole journal
// (journal.scrubbed, no differences), and when a record is damaged under
// the running service, the next scrub stops it: exit 4, the recovery
// message in its log, rather than a service that fails every reconcile.
func TestServeScrubs(t *testing.T) {
	h := newDamageHost(t)
	j, err := journal.Open(h.journal, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := j.Get(2)
	j.Close()
	if err != nil || !ok {
		t.Fatalf("record 2: %v %v", ok, err)
	}
	record := event.Encode(rec)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	done := h.startServe(t, ctx, &stderr, "--scrub-interval", "50ms")
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, errs := h.ask(t, "journal", "--kind", string(event.JournalScrubbed), "--json")
		if code != command.ExitOK {
			t.Fatalf("journal --kind journal.scrubbed: exit %d\n%s", code, errs)
		}
		if strings.Contains(out, `"differences":0`) && strings.Contains(out, `"records":`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no journal.scrubbed record:\n%s\nserve said:\n%s", out, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The service appends meanwhile (each scrub), and its copies of the
	// page may carry the record undamaged: flip until it is found.
	for range 100 {
		flipEvery(t, h.journal, record, len(record)-3)
		select {
		case code := <-done:
			done2 := make(chan int, 1)
			done2 <- code
			checkStoppedOnDamage(t, done2, &stderr, h.journal)
			if !strings.Contains(stderr.String(), `msg="journal scrub found damage; stopping"`) {
				t.Errorf("the scrub did not say it found the damage:\n%s", stderr.String())
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	checkStoppedOnDamage(t, done, &stderr, h.journal)
}

// TestServeStopsOnDamageACommandFound: damage a client's command finds in
// the running service's journal (a projection value, read by status)
// stops the service too, whichever part of it read the damage.
func TestServeStopsOnDamageACommandFound(t *testing.T) {
	h := newDamageHost(t)
	owned := storedValue(t, h.journal, "projection", "owned/file:/etc/app/app.conf")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	done := h.startServe(t, ctx, &stderr)
	if code, out, errs := h.ask(t, "status"); code != command.ExitOK {
		t.Fatalf("status before the damage: exit %d\n%s%s", code, out, errs)
	}
	if flipEvery(t, h.journal, owned, 1) == 0 {
		t.Fatal("the owned value is not in the file")
	}
	code, _, errs := h.ask(t, "status")
	if code != exitDamaged || !strings.Contains(errs, "To recover") {
		t.Errorf("status on the damaged projection: exit %d, want %d with the recovery message:\n%s", code, exitDamaged, errs)
	}
	checkStoppedOnDamage(t, done, &stderr, h.journal)
}

// TestProjectionLayout1: a journal whose projection was stored before
// checksums (no format key, values without their checksum) is read as it
// is, and the first append rewrites the projection with checksums.
func TestProjectionLayout1(t *testing.T) {
	h := newDamageHost(t)
	code, want, errs := h.run(t, context.Background(), "status", "--json", "--owned")
	if code != command.ExitOK {
		t.Fatalf("status: exit %d\n%s", code, errs)
	}
	// Back to layout 1, as a host before checksums left it.
	db, err := bolt.Open(h.journal, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		p := tx.Bucket([]byte("projection"))
		if err := p.Delete([]byte("format")); err != nil {
			return err
		}
		old := map[string][]byte{}
		_ = p.ForEach(func(k, v []byte) error {
			old[string(k)] = bytes.Clone(v[:len(v)-4])
			return nil
		})
		for k, v := range old {
			if err := p.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	if code, got, errs := h.run(t, context.Background(), "status", "--json", "--owned"); code != command.ExitOK || got != want {
		t.Fatalf("status of layout 1: exit %d\n%s\ngot:\n%s\nwant:\n%s", code, errs, got, want)
	}
	h.mustRun(t, "apply", h.decl2)
	h.mustRun(t, "replay", "--verify")
	if f := storedValue(t, h.journal, "projection", "format"); string(f) != "2" {
		t.Errorf("after an append the projection's format is %q, want 2", f)
	}
	// Now checksummed: a flipped byte is found.
	v := storedValue(t, h.journal, "projection", "owned/file:/etc/app/app.conf")
	flipAll(t, h.journal, v, 1)
	if code, _, _ := h.run(t, context.Background(), "status"); code != exitDamaged {
		t.Errorf("status after a flip in the rewritten projection: exit %d, want %d", code, exitDamaged)
	}
}
