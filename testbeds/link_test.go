package testbeds_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/testbeds"
)

var (
	bins testbeds.Binaries
	// binDir holds every binary the tests build, once per test binary;
	// TestMain removes it when they have run.
	binDir string
)

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "mesh-beds-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins, err = testbeds.Build(binDir, "bed")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(binDir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

func beds(t *testing.T) *testbeds.Bed {
	t.Helper()
	if testing.Short() {
		t.Skip("runs whole meshes of real processes; skipped with -short")
	}
	return testbeds.New(t, bins)
}

func readRoot(t *testing.T, h *testbeds.Host, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Root, path))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func hasContent(h *testbeds.Host, path, want string) func() error {
	return func() error {
		b, err := os.ReadFile(filepath.Join(h.Root, path))
		if err != nil {
			return err
		}
		if string(b) != want {
			return fmt.Errorf("%s holds %q, want %q", path, b, want)
		}
		return nil
	}
}

// TestPushIsAppliedAndReported: meshctl declare → the host applies it at
// once → its heartbeat shows it in meshctl nodes.
func TestPushIsAppliedAndReported(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start()
	decl := b.Declare("web-1", 1, testbeds.Files{"/etc/motd": "hello from the mesh\n"})

	out := b.MustMeshctl("declare", "web-1", decl)
	if !strings.Contains(out, "web-1 accepted revision 1") || !strings.Contains(out, "applied") {
		t.Errorf("meshctl declare printed:\n%s", out)
	}
	if got := readRoot(t, h, "etc/motd"); got != "hello from the mesh\n" {
		t.Errorf("after declare returned, /etc/motd holds %q", got)
	}
	testbeds.Eventually(t, 10*time.Second, "meshctl nodes shows revision 1 applied", func() error {
		r := b.Meshctl("nodes", "--json")
		if r.Code != 0 {
			return errors.New(r.String())
		}
		nodes, err := testbeds.JSONLines[map[string]any](r.Stdout)
		if err != nil {
			return fmt.Errorf("%v in %s", err, r.Stdout)
		}
		if len(nodes) != 1 || !strings.Contains(r.Stdout, `"web-1"`) {
			return fmt.Errorf("nodes: %s", r.Stdout)
		}
		text := b.MustMeshctl("nodes")
		if !strings.Contains(text, "web-1") || !strings.Contains(text, "ok") {
			return fmt.Errorf("nodes table:\n%s", text)
		}
		return nil
	})
	// The host's journal says why the file is there: the pushed declaration.
	why := h.Run("journal", "--why", "file:/etc/motd")
	if why.Code != 0 || !strings.Contains(why.Stdout, "declaration.received") || !strings.Contains(why.Stdout, "link") {
		t.Errorf("mesh-host journal --why:\n%s", why)
	}
}

// TestOfflineNodeGetsItsDeclarationOnReconnect: a declaration pushed while
// the node is away is stored; the node asks for it when it comes back.
func TestOfflineNodeGetsItsDeclarationOnReconnect(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start()
	b.MustMeshctl("declare", "web-1", b.Declare("web-1", 1, testbeds.Files{"/etc/app.conf": "v1\n"}))
	if code := h.Stop(); code != 0 {
		t.Fatalf("mesh-host serve exited %d on SIGTERM", code)
	}

	out := b.MustMeshctl("declare", "web-1", b.Declare("web-1", 2, testbeds.Files{"/etc/app.conf": "v2\n"}))
	if !strings.Contains(out, "offline") {
		t.Errorf("declare to a stopped node printed:\n%s", out)
	}
	if got := readRoot(t, h, "etc/app.conf"); got != "v1\n" {
		t.Fatalf("the stopped node changed: %q", got)
	}
	h.Start()
	testbeds.Eventually(t, 20*time.Second, "the node applies revision 2 on reconnect", hasContent(h, "etc/app.conf", "v2\n"))

	// An old revision declared again is refused by the control service
	// before it reaches anyone.
	r := b.Meshctl("declare", "web-1", b.Declare("web-1", 1, testbeds.Files{"/etc/app.conf": "v1\n"}))
	if r.Code != 2 || !strings.Contains(r.Stderr, "revision 1") {
		t.Errorf("declaring an older revision: %s", r)
	}
}

// TestEventsStreamHoldsTheJournalExactlyOnce: while a host changes things,
// the broker is restarted and the host is killed and restarted; afterwards
// the control plane holds every journal record once, in order, no gaps.
func TestEventsStreamHoldsTheJournalExactlyOnce(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start()

	push := func(rev uint64) {
		files := testbeds.Files{}
		for i := range 200 {
			files[fmt.Sprintf("/etc/app/f%03d.conf", i)] = fmt.Sprintf("revision %d file %d\n", rev, i)
		}
		// --wait 0: do not wait for the apply; the faults land mid-stream.
		r := b.Meshctl("declare", "web-1", b.Declare("web-1", rev, files), "--wait", "0")
		if r.Code != 0 {
			t.Fatalf("declare %d: %s", rev, r)
		}
	}
	// faultAfter waits until the journal has grown by more records, so
	// the fault lands while records are being appended and sent (a
	// revision's apply appends 200), and logs how far the upward stream
	// had got.
	var info journal.Info
	status := func() (err error) {
		info, err = h.JournalInfo()
		return err
	}
	// base is the head before the latest push: the growth is counted from
	// there, since the apply may be done before its head is first read.
	var base uint64
	mark := func() {
		// Right after a restart the service may hold the journal before
		// its socket answers: status then fails for a moment.
		testbeds.Eventually(t, 30*time.Second, "status answers", status)
		base = info.Head
	}
	faultAfter := func(more uint64, fault string, do func()) {
		head := base + more
		testbeds.Eventually(t, 30*time.Second, "the journal grows", func() error {
			if err := status(); err != nil {
				return err
			}
			if info.Head < head {
				return fmt.Errorf("head #%d", info.Head)
			}
			return nil
		})
		t.Logf("%s at head #%d, sent through #%d", fault, info.Head, info.Acked)
		do()
	}
	mark()
	push(1)
	faultAfter(50, "broker restarted", b.Control.Restart)
	mark()
	push(2)
	faultAfter(3, "host killed", h.Kill)
	h.Start()
	mark()
	push(3)
	faultAfter(50, "broker restarted", b.Control.Restart)
	mark()
	push(4)
	faultAfter(3, "host killed", h.Kill)
	h.Start()
	push(5)
	push(6)

	testbeds.Eventually(t, 60*time.Second, "the last revision is applied", hasContent(h, "etc/app/f199.conf", "revision 6 file 199\n"))
	var local, upstream []event.Record
	testbeds.Eventually(t, 60*time.Second, "the events stream catches up with the journal", func() error {
		local = h.Records()
		r := b.Meshctl("journal", "web-1", "--json")
		if r.Code != 0 {
			return errors.New(r.String())
		}
		var err error
		if upstream, err = testbeds.DecodeRecords(r.Stdout); err != nil {
			return err
		}
		if len(upstream) < len(local) {
			return fmt.Errorf("the stream holds %d of %d records", len(upstream), len(local))
		}
		return nil
	})
	// Records appended after the snapshot of local (a heartbeat-driven
	// reconcile, a link record) may be upstream too: compare the prefix,
	// then check the rest runs on without gaps.
	for i, r := range upstream {
		if r.Seq != uint64(i+1) {
			t.Fatalf("upstream record %d has seq %d: a gap or a duplicate", i, r.Seq)
		}
	}
	for i, want := range local {
		got := upstream[i]
		if got.Kind == event.DeclarationReceived {
			got.Payload = withoutDocument(t, got)
		}
		if got.Seq != want.Seq || got.Kind != want.Kind || got.Cause != want.Cause || got.Resource != want.Resource ||
			!got.Time.Equal(want.Time) || !reflect.DeepEqual(compact(got.Payload), compact(want.Payload)) {
			t.Fatalf("record %d differs:\n stream  %+v\n journal %+v", want.Seq, got, want)
		}
	}
	t.Logf("%d records, each once, after two broker restarts and two killed hosts", len(local))
}

// withoutDocument checks that a declaration.received sent upward carries
// the document its journal stores apart, the one it names, and returns
// its payload as the journal holds it: without the document.
func withoutDocument(t *testing.T, r event.Record) json.RawMessage {
	t.Helper()
	var fields map[string]json.RawMessage
	var p event.DeclarationReceivedPayload
	if json.Unmarshal(r.Payload, &fields) != nil || json.Unmarshal(r.Payload, &p) != nil {
		t.Fatalf("record %d: the payload does not decode: %s", r.Seq, r.Payload)
	}
	sum := sha256.Sum256(p.Document)
	if len(p.Document) == 0 || p.DocumentSHA256 != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("record %d went upward without the document it names (%s): %d bytes", r.Seq, p.DocumentSHA256, len(p.Document))
	}
	delete(fields, "document")
	b, _ := json.Marshal(fields)
	return b
}

func compact(raw json.RawMessage) any {
	var v any
	_ = json.Unmarshal(raw, &v)
	return v
}

// TestDriftFoundByTheTimerIsRepairedAndVisible: a change made by hand in the
// root is found by the drift timer, journaled, repaired, and shown by
// meshctl journal.
func TestDriftFoundByTheTimerIsRepairedAndVisible(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start("--drift-interval", "500ms")
	b.MustMeshctl("declare", "web-1", b.Declare("web-1", 1, testbeds.Files{"/etc/motd": "as declared\n"}))

	if err := os.WriteFile(filepath.Join(h.Root, "etc/motd"), []byte("changed by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbeds.Eventually(t, 20*time.Second, "the timer repairs the file", hasContent(h, "etc/motd", "as declared\n"))
	testbeds.Eventually(t, 20*time.Second, "meshctl journal shows the drift and the repair", func() error {
		r := b.Meshctl("journal", "web-1", "--why", "file:/etc/motd")
		if r.Code != 0 {
			return errors.New(r.String())
		}
		if !strings.Contains(r.Stdout, "drift.observed") || !strings.Contains(r.Stdout, "resource.applied") {
			return fmt.Errorf("meshctl journal --why:\n%s", r.Stdout)
		}
		return nil
	})
}

// TestBadMessagesAreRefusedAndTheHostLivesOn: whatever arrives on a node's
// declaration subject, the host refuses it by name, journals why, and goes
// on serving.
func TestBadMessagesAreRefusedAndTheHostLivesOn(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start()
	nc, err := nats.Connect(b.URL(), nats.UserCredentials(b.CredsFile()), nats.RootCAs(b.CAFile()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	subject := linkproto.DeclarationSubject(testbeds.Mesh, "web-1")
	doc := func(node string, rev int) string {
		return fmt.Sprintf(`{"mesh":"home","node":%q,"revision":%d,"resources":[]}`, node, rev)
	}
	// What the control user may publish, a broker turned attacker may too:
	// every push below but the unsigned and forged ones is signed with the
	// mesh's key, so that the host's later checks are what refuse it.
	key, err := b.DeclarationKey()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := linkproto.NewSigningKey()
	signedBy := func(k nkeys.KeyPair, node string, rev int, document string) string {
		d := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "home", Node: node, Revision: uint64(rev), Document: json.RawMessage(document), Operator: "attacker"}
		if k != nil {
			if err := d.Sign(k); err != nil {
				t.Fatal(err)
			}
		}
		return string(linkproto.Marshal(d))
	}
	push := func(node string, rev int, document string) string { return signedBy(key, node, rev, document) }
	setuid := `{"mesh":"home","node":"web-1","revision":1,"resources":[{"file":{"path":"/usr/local/bin/x","content":"x","mode":"4755"}}]}`
	tampered := strings.Replace(push("web-1", 1, doc("web-1", 1)), `"resources":[]`, `"resources":[{"file":{"path":"/etc/x","content":"x"}}]`, 1)
	corpus := []struct{ name, body, reason string }{
		{"not json", "{{{", "malformed message"},
		{"binary", "\x00\xff\xfe", "malformed message"},
		{"no protocol", `{"mesh":"home","node":"web-1","revision":1,"document":{}}`, "no protocol field"},
		{"future protocol", strings.Replace(push("web-1", 1, doc("web-1", 1)), fmt.Sprintf(`"protocol":%d`, linkproto.ProtocolVersion), `"protocol":7`, 1), "protocol 7 is newer"},
		{"unsigned", signedBy(nil, "web-1", 1, setuid), "unsigned"},
		{"signed by another key", signedBy(otherKey, "web-1", 1, setuid), "does not trust"},
		{"changed after signing", tampered, "bad signature"},
		{"another node", push("web-2", 1, doc("web-2", 1)), "for another node"},
		{"document for another node", push("web-1", 1, doc("web-2", 1)), "web-2"},
		{"bad document", push("web-1", 1, `{"mesh":"home","node":"web-1","revision":1,"resources":[{"file":{"path":"../etc/shadow","content":"x"}}]}`), "resources[0].file.path"},
		{"unknown field in document", push("web-1", 1, `{"mesh":"home","node":"web-1","revision":1,"bogus":true,"resources":[]}`), "bogus"},
	}
	for _, c := range corpus {
		msg, err := nc.Request(subject, []byte(c.body), 5*time.Second)
		if err != nil {
			t.Errorf("%s: no answer: %v", c.name, err)
			continue
		}
		var ack linkproto.Ack
		if err := json.Unmarshal(msg.Data, &ack); err != nil || ack.Accepted || !strings.Contains(ack.Reason, c.reason) {
			t.Errorf("%s: ack %s, want refused with %q", c.name, msg.Data, c.reason)
		}
	}
	// Over the size limit, the broker itself refuses it (its max_payload is
	// the host's limit); the link's own tests cover a broker that allows more.
	if _, err := nc.Request(subject, make([]byte, linkproto.MaxDeclarationSize+1), 5*time.Second); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("an oversized push: %v, want the broker's %v", err, nats.ErrMaxPayload)
	}
	if !h.Running() {
		t.Fatal("the host died of a bad message")
	}
	for _, p := range []string{"usr/local/bin/x", "etc/x"} {
		if _, err := os.Lstat(filepath.Join(h.Root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a forged declaration was applied: /%s: %v", p, err)
		}
	}
	recs := h.Records()
	var refusals int
	for _, r := range recs {
		if r.Kind == event.LinkRefused || r.Kind == event.DeclarationRefused {
			refusals++
		}
	}
	if refusals < len(corpus) {
		t.Errorf("%d refusals journaled for %d bad messages", refusals, len(corpus))
	}
	// And it still takes a good one.
	out := b.MustMeshctl("declare", "web-1", b.Declare("web-1", 1, testbeds.Files{"/etc/motd": "fine\n"}))
	if !strings.Contains(out, "accepted") {
		t.Errorf("a good declaration after the bad ones:\n%s", out)
	}
}

// TestSIGTERMFinishesTheApplyInFlight: a host told to stop mid-apply
// finishes and journals the apply, then exits 0; nothing is left pending.
func TestSIGTERMFinishesTheApplyInFlight(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start()
	files := testbeds.Files{}
	for i := range 400 {
		files[fmt.Sprintf("/etc/app/f%03d.conf", i)] = fmt.Sprintf("file %d\n", i)
	}
	b.MustMeshctl("declare", "web-1", b.Declare("web-1", 1, files), "--wait", "0")
	testbeds.Eventually(t, 20*time.Second, "the apply starts", func() error {
		r := h.Run("journal", "--kind", string(event.ReconcileStarted), "--json")
		if !strings.Contains(r.Stdout, `"revision":1`) {
			return fmt.Errorf("no reconcile.started yet: %s", r)
		}
		return nil
	})
	if code := h.Stop(); code != 0 {
		t.Fatalf("mesh-host serve exited %d on SIGTERM", code)
	}
	r := h.Run("status", "--json")
	var st struct {
		State struct {
			Pending       json.RawMessage `json:"pending"`
			LastReconcile *struct {
				Revision uint64 `json:"revision"`
			} `json:"last_reconcile"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r)
	}
	if st.State.Pending != nil || st.State.LastReconcile == nil || st.State.LastReconcile.Revision != 1 {
		t.Errorf("after SIGTERM mid-apply: pending %s, last reconcile %+v", st.State.Pending, st.State.LastReconcile)
	}
	if got := readRoot(t, h, "etc/app/f399.conf"); got != "file 399\n" {
		t.Errorf("the last file holds %q", got)
	}
}

// TestDeadLinkIsNoticedByPings: a broker that stops answering without
// closing the connection (its process stopped, its machine's kernel still
// acknowledging) is noticed by the host's pings, journaled as link.down,
// and the link comes back when the broker does. Pings 2 s apart here, so
// noticed after some 6 s; at the default of 60 s it is some 3 minutes (a
// path that died is the kernel's to notice: TestLinkSocketIsWatchedByTheKernel).
func TestDeadLinkIsNoticedByPings(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start("--ping-interval", "2s")
	count := func(k event.Kind) int {
		r := h.Run("journal", "--kind", string(k), "--json")
		recs, _ := testbeds.DecodeRecords(r.Stdout)
		return len(recs)
	}
	testbeds.Eventually(t, 10*time.Second, "the link is up", func() error {
		if count(event.LinkUp) == 0 {
			return errors.New("no link.up yet")
		}
		return nil
	})
	ups := count(event.LinkUp)
	b.Control.Freeze()
	frozen := time.Now()
	defer b.Control.Thaw()
	testbeds.Eventually(t, 40*time.Second, "the host notices the dead link", func() error {
		if count(event.LinkDown) == 0 {
			return errors.New("no link.down yet")
		}
		return nil
	})
	noticed := time.Since(frozen)
	// The deadline above is several times the ping window, so a slow
	// machine does not fail it; the figure is in the log.
	t.Logf("a silent broker was noticed after %s", noticed.Round(100*time.Millisecond))
	b.Control.Thaw()
	testbeds.Eventually(t, 60*time.Second, "the link comes back", func() error {
		if count(event.LinkUp) <= ups {
			return errors.New("no new link.up yet")
		}
		return nil
	})
}
