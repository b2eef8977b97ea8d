package testbeds_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

// canary is a random secret value, recognisable wherever a copy of it
// lands.
func canary(t *testing.T) string {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "canary-" + base64.RawURLEncoding.EncodeToString(b)
}

// leaks are the forms of a value that must appear nowhere but the managed
// file: the value, its plain digest (a low-entropy password would be
// guessable from it), and its base64 (how JSON carries bytes).
func leaks(value string) []string {
	sum := sha256.Sum256([]byte(value))
	return []string{value, hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString([]byte(value)),
		base64.RawURLEncoding.EncodeToString([]byte(value))}
}

// TestSecretsAreSealedEverywhere is the canary test of secrets: two random
// values of one secret go through everything a secret can (stored, sealed,
// declared and pushed over the link, applied, drifted in content and in
// mode, found and repaired, planned, replayed, verified, shown by every
// command of both programs, the host restarted, a second value rolled
// out), then every byte of the bed (the control's data directory with its
// JetStream files, the host's state directory and journal, both services'
// logs) and every command's output is searched: the values appear in the
// managed file only.
func TestSecretsAreSealedEverywhere(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start("--drift-interval", "1h")
	first, second := canary(t), canary(t)
	var outputs []string
	keep := func(r testbeds.Result) testbeds.Result {
		outputs = append(outputs, r.Stdout, r.Stderr)
		return r
	}
	// The value comes from a file outside the bed, gone once read.
	setSecret := func(value string) {
		f := filepath.Join(t.TempDir(), "value")
		if err := os.WriteFile(f, []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := keep(b.Meshctl("secret", "set", "db-password", "--from-file", f)); r.Code != 0 {
			t.Fatalf("secret set: %s", r)
		}
		os.Remove(f)
	}
	declare := func(rev int) string {
		path := filepath.Join(b.Dir, fmt.Sprintf("secret-r%d.yaml", rev))
		doc := fmt.Sprintf("mesh: home\nnode: web-1\nrevision: %d\nresources:\n"+
			"  - directory: {path: /etc/app}\n"+
			"  - file: {path: /etc/app/db.pass, content: {secret: db-password}, mode: \"0600\"}\n"+
			"  - file: {path: /etc/app/app.conf, content: \"password_file=/etc/app/db.pass\\n\"}\n", rev)
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		// The node tells its sealing key in its hello; until then the
		// declaration is refused, by name.
		testbeds.Eventually(t, 20*time.Second, "declare with a secret", func() error {
			r := keep(b.Meshctl("declare", "web-1", path, "--wait", "10s"))
			if r.Code != 0 {
				return errors.New(r.String())
			}
			return nil
		})
		return path
	}

	setSecret(first)
	file := declare(1)
	managed := filepath.Join(h.Root, "etc/app/db.pass")
	testbeds.Eventually(t, 20*time.Second, "the first value applied", hasContent(h, "etc/app/db.pass", first))
	if st, err := os.Stat(managed); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the secret file: %v %v", st, err)
	}

	// Drift of content, then of mode only (the file still holds the
	// value: what drift reports of it must not be its plain digest).
	if err := os.WriteFile(managed, []byte("changed by hand\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keep(h.Run("check", "--no-repair"))
	if r := keep(h.Run("check")); r.Code != 0 {
		t.Fatalf("check: %s", r)
	}
	if got := readRoot(t, h, "etc/app/db.pass"); got != first {
		t.Fatalf("after the repair: %q", got)
	}
	if err := os.Chmod(managed, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := keep(h.Run("check", "--no-repair")); r.Code != 1 {
		t.Fatalf("check --no-repair of a drifted mode: %s", r)
	}
	keep(h.Run("check"))

	// Every command that shows what the host holds.
	for _, args := range [][]string{
		{"journal"}, {"journal", "--json"}, {"journal", "--why", "file:/etc/app/db.pass"}, {"journal", "--verify"},
		{"status"}, {"status", "--json"}, {"status", "--owned"}, {"replay", "--verify"}, {"replay", "--json"},
		{"plan", file},
	} {
		keep(h.Run(args...))
	}
	for _, args := range [][]string{{"nodes"}, {"nodes", "--json"}, {"journal", "web-1"}, {"journal", "web-1", "--json"}, {"secret", "list"}} {
		keep(b.Meshctl(args...))
	}

	// A second value, rolled out; then the host restarted.
	setSecret(second)
	declare(2)
	testbeds.Eventually(t, 20*time.Second, "the second value applied", hasContent(h, "etc/app/db.pass", second))
	h.Stop()
	h.Start("--drift-interval", "1h")
	if r := keep(h.Run("check")); r.Code != 0 || readRoot(t, h, "etc/app/db.pass") != second {
		t.Fatalf("after a restart: %s", r)
	}
	keep(h.Run("journal", "--json"))
	keep(b.Meshctl("journal", "web-1", "--json"))

	// Stop both services, so that their logs and stores are whole.
	h.Stop()
	b.Control.Stop()

	var searched int
	err := filepath.WalkDir(b.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || path == managed {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		searched++
		for _, v := range [2]string{first, second} {
			for _, form := range leaks(v) {
				if strings.Contains(string(data), form) {
					t.Errorf("%s holds the secret (%q)", path, form)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, out := range outputs {
		for _, v := range [2]string{first, second} {
			for _, form := range leaks(v) {
				if strings.Contains(out, form) {
					t.Errorf("command output %d holds the secret:\n%s", i, out)
				}
			}
		}
	}
	if searched < 10 {
		t.Fatalf("searched only %d files", searched)
	}
	t.Logf("searched %d files and %d outputs", searched, len(outputs))
}
