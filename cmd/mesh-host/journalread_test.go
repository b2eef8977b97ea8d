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
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := kp.PublicKey()
	damages := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"the fifth page zeroed", func(t *testing.T, path string) { zeroPage(t, path, 4) }},
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
			os.Remove(h.journal + ".damaged")
			if err := os.WriteFile(h.journal, good, 0o600); err != nil {
				t.Fatal(err)
			}
			d.damage(t, h.journal)
			damaged, err := os.ReadFile(h.journal)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(damaged, good) {
				t.Fatal("the damage changed nothing")
			}
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
