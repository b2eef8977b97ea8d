package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/enrolment"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
)

// TestApplyOnAnEnrolledHost: with a link.json in the state directory,
// apply is refused (exit 2, nothing applied, the refusal journaled)
// unless --local is given; with it, the declaration is journaled as a
// local override naming the user, and a later local revision is ordered
// against it, not against the mesh's. Without link.json, apply is as ever.
func TestApplyOnAnEnrolledHost(t *testing.T) {
	dir := t.TempDir()
	root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
	for _, d := range []string{filepath.Join(root, "etc"), state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	link := `{"mesh":"lab","node":"web-1","urls":["tls://127.0.0.1:4222"],"signing_key":"` + linkprototest.SigningKeyPub + `"}`
	if err := os.WriteFile(filepath.Join(state, enrolment.LinkConfigFile), []byte(link), 0o600); err != nil {
		t.Fatal(err)
	}
	decl := func(rev int, content string) string {
		path := filepath.Join(dir, "decl"+strings.Repeat("x", rev)+".yaml")
		doc := "mesh: lab\nnode: web-1\nrevision: " + string(rune('0'+rev)) + "\nresources:\n  - file: {path: /etc/motd, content: \"" + content + "\\n\"}\n"
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := runCLI(context.Background(), append([]string{"--root", root, "--state-dir", state}, args...), &out, &out, nil)
		return code, out.String()
	}
	motd := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "etc/motd"))
		return string(b)
	}
	received := func() []event.DeclarationReceivedPayload {
		j, err := hostjournal.Open(filepath.Join(state, "journal.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		var ps []event.DeclarationReceivedPayload
		if err := j.ScanKind(event.DeclarationReceived, 1, func(r event.Record) error {
			var p event.DeclarationReceivedPayload
			if err := json.Unmarshal(r.Payload, &p); err != nil {
				return err
			}
			ps = append(ps, p)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return ps
	}

	code, out := run("apply", decl(2, "by hand"))
	if code != command.ExitRefused || !strings.Contains(out, "would step outside the mesh") || !strings.Contains(out, "--local") ||
		!strings.Contains(out, "meshctl declare web-1 FILE --reclaim") {
		t.Fatalf("apply on an enrolled host: exit %d, want %d:\n%s", code, command.ExitRefused, out)
	}
	if got := motd(); got != "" {
		t.Fatalf("refused, yet /etc/motd is %q", got)
	}
	if got := received(); len(got) != 0 {
		t.Fatalf("refused, yet journaled as received: %+v", got)
	}

	t.Setenv("SUDO_USER", "bob")
	if code, out := run("apply", "--local", decl(2, "by hand")); code != 0 || !strings.Contains(out, "a LOCAL OVERRIDE by bob") {
		t.Fatalf("apply --local: exit %d:\n%s", code, out)
	}
	if got := motd(); got != "by hand\n" {
		t.Fatalf("after apply --local, /etc/motd is %q", got)
	}
	got := received()
	if len(got) != 1 || !got[0].Local || got[0].User != "bob" || got[0].Revision != 2 {
		t.Fatalf("journaled %+v, want one local declaration by bob", got)
	}
	if code, out := run("apply", "--local", decl(1, "older")); code != command.ExitRefused || !strings.Contains(out, "the local override in force") {
		t.Fatalf("an older local revision: exit %d:\n%s", code, out)
	}
	code, out = run("status")
	if code != 0 || !strings.Contains(out, "revision 2, a LOCAL OVERRIDE from file:"+decl(2, "by hand")+" by bob since") ||
		!strings.Contains(out, "the mesh had declared nothing") {
		t.Fatalf("status: exit %d:\n%s", code, out)
	}

	// Not enrolled: applied as ever, with no flag, and no override.
	if err := os.Remove(filepath.Join(state, enrolment.LinkConfigFile)); err != nil {
		t.Fatal(err)
	}
	if code, out := run("apply", decl(3, "unenrolled")); code != 0 || strings.Contains(out, "LOCAL OVERRIDE") {
		t.Fatalf("apply on a host not enrolled: exit %d:\n%s", code, out)
	}
	if got := received(); len(got) != 2 || got[1].Local || got[1].User != "" {
		t.Fatalf("journaled %+v, want a second declaration that is not local", got)
	}
	if code, out := run("status"); code != 0 || strings.Contains(out, "LOCAL OVERRIDE") || !strings.Contains(out, "applied on the machine") {
		t.Fatalf("status, not enrolled: exit %d:\n%s", code, out)
	}
}

// TestLocalUser: sudo's user first, then the login's; a name that is not
// one (a space, a control character, too long) is passed over; else the
// uid's name or number.
func TestLocalUser(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		env  map[string]string
		uid  int
		want string
	}{
		{map[string]string{"SUDO_USER": "alice", "USER": "root"}, 0, "alice"},
		{map[string]string{"USER": "bob", "LOGNAME": "carol"}, 0, "bob"},
		{map[string]string{"LOGNAME": "carol"}, 0, "carol"},
		{map[string]string{"SUDO_USER": "al ice", "USER": "bob"}, 0, "bob"},
		{map[string]string{"SUDO_USER": "al\x1bice", "USER": strings.Repeat("x", 65)}, 0, "root"},
		{nil, 0, "root"},
		{nil, 4_000_000_000, "uid 4000000000"},
	} {
		if got := localUser(env(tc.env), tc.uid); got != tc.want {
			t.Errorf("localUser(%v, %d) = %q, want %q", tc.env, tc.uid, got, tc.want)
		}
	}
}
