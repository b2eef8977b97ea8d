package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/enrolment"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
)

// TestJournalVerify: declarations from the link verify against the mesh's
// key in link.json; one applied from a file is local; a record whose
// document was changed in the journal after it was signed (someone with
// the disk, or a bug) fails, and the command says which and exits 1.
func TestJournalVerify(t *testing.T) {
	state := t.TempDir()
	link := `{"mesh":"lab","node":"web-1","urls":["tls://127.0.0.1:4222"],"signing_key":"` + linkprototest.SigningKeyPub + `"}`
	if err := os.WriteFile(filepath.Join(state, enrolment.LinkConfigFile), []byte(link), 0o600); err != nil {
		t.Fatal(err)
	}
	h, j := newTestLinkHost(t)
	for rev := uint64(1); rev <= 2; rev++ {
		if ack := h.Accept(context.Background(), linkprototest.Push(rev, linkprototest.Doc(rev, "hi\n")), event.TriggerPushed); !ack.Accepted {
			t.Fatal(ack.Reason)
		}
	}
	local := event.DeclarationReceivedPayload{Revision: 3, Digest: "sha256:x", Source: "file:/tmp/x.yaml", Document: []byte(linkprototest.Doc(3, "local\n"))}
	if _, err := j.Append(event.New(event.DeclarationReceived, 0, "", local)); err != nil {
		t.Fatal(err)
	}
	path := j.Path()

	verify := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := runCLI(context.Background(), append([]string{"--state-dir", state, "--journal", path, "journal", "--verify"}, args...), &out, &errb, nil)
		return code, out.String() + errb.String()
	}
	j.Close()
	code, out := verify()
	if code != 0 || !strings.Contains(out, "2 from the mesh, verified; 1 local; 0 failed") || !strings.Contains(out, `declared by "tester"`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}

	// Another key: nothing from the link verifies.
	other, _ := linkproto.NewSigningKey()
	otherPub, _ := other.PublicKey()
	code, out = verify("--key", otherPub)
	if code != 1 || !strings.Contains(out, "0 from the mesh, verified; 1 local; 2 failed") || !strings.Contains(out, "does not trust") {
		t.Fatalf("another key: exit %d:\n%s", code, out)
	}
	if code, out = verify("--key", "UABC"); code != 2 || !strings.Contains(out, "not a mesh signing key") {
		t.Fatalf("a bad --key: exit %d:\n%s", code, out)
	}

	// A declaration whose document was edited in the journal.
	j2, err := hostjournal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	forged := linkprototest.Push(4, linkprototest.Doc(4, "signed\n"))
	p := event.DeclarationReceivedPayload{Revision: 4, Digest: "sha256:y", Source: "link:pushed", Document: []byte(linkprototest.Doc(4, "edited\n")),
		Operator: forged.Operator, Signer: forged.Signer, Signature: forged.Signature}
	if _, err := j2.Append(event.New(event.DeclarationReceived, 0, "", p)); err != nil {
		t.Fatal(err)
	}
	j2.Close()
	code, out = verify()
	if code != 1 || !strings.Contains(out, "revision 4: FAILED: bad signature") || !strings.Contains(out, "2 from the mesh, verified; 1 local; 1 failed") {
		t.Fatalf("an edited record: exit %d:\n%s", code, out)
	}
}
