package testbeds_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/testbeds"
)

// kindCount counts h's records of kind k.
func kindCount(h *testbeds.Host, k event.Kind) int {
	return len(kindsOf(h.Records(), k))
}

// TestPlanAcrossNodes: meshctl plan --select asks every selected node,
// real hosts on their own roots; the two whose plans are the same are
// shown once, the one not running is offline, and the exit status says
// not every node planned. No machine changes, and each node that
// answered journaled one plan.answered and nothing else of it.
func TestPlanAcrossNodes(t *testing.T) {
	b := beds(t)
	web1, web2, web3, db := b.AddHost("web-1"), b.AddHost("web-2"), b.AddHost("web-3"), b.AddHost("db-1")
	for _, h := range []*testbeds.Host{web1, web2, db} {
		h.Start()
	}
	for _, h := range []*testbeds.Host{web1, web2, web3} {
		b.MustMeshctl("label", h.Name, "role=web")
	}
	b.MustMeshctl("label", db.Name, "role=db")
	for _, h := range []*testbeds.Host{web1, web2} {
		b.MustMeshctl("declare", h.Name, b.Declare(h.Name, 1, testbeds.Files{"/etc/motd": "one\n", "/etc/app/app.conf": "a=1\n"}))
	}
	// web-3 is offline: declared for, never started.
	b.MustMeshctl("declare", web3.Name, b.Declare(web3.Name, 1, testbeds.Files{"/etc/motd": "one\n"}))

	before := map[string]int{}
	for _, h := range []*testbeds.Host{web1, web2} {
		before[h.Name+"/received"] = kindCount(h, event.DeclarationReceived)
		before[h.Name+"/reconciles"] = kindCount(h, event.ReconcileStarted)
	}

	// The stored declarations, again: nothing to change.
	r := b.Meshctl("plan", "--select", "role=web", "--deadline", "5s")
	if r.Code != 1 {
		t.Fatalf("with a node offline: got %s, want exit 1", r)
	}
	for _, want := range []string{
		"2 nodes: no changes, 3 unchanged\n  web-1, web-2\n",
		"offline (1):\n  web-3: not connected\n",
		"3 nodes: 2 planned (1 plan), 1 offline\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("meshctl plan: the output lacks %q:\n%s", want, r.Stdout)
		}
	}
	if !strings.Contains(r.Stderr, "not every node planned") {
		t.Errorf("meshctl plan: stderr %q, want it to say not every node planned", r.Stderr)
	}

	// A file for every node: its mesh and node are each node's.
	next := b.Declare("anyone", 9, testbeds.Files{"/etc/motd": "two\n", "/etc/app/app.conf": "a=1\n", "/etc/app/new.conf": "n\n"})
	r = b.Meshctl("plan", "--select", "role in (web,db)", "--file", next)
	for _, want := range []string{
		"2 nodes: 2 to change, 2 unchanged\n  web-1, web-2\n    created     file:/etc/app/new.conf\n    updated     file:/etc/motd                                differs: content\n",
		"1 node: 4 to change, 0 unchanged\n  db-1\n    created     directory:/etc/app\n",
		"offline (1):\n  web-3: not connected\n",
		"4 nodes: 3 planned (2 plans), 1 offline\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("meshctl plan --file: the output lacks %q:\n%s", want, r.Stdout)
		}
	}
	// --json: one line a node, with the node's own answer.
	r = b.Meshctl("plan", "--select", "role=db", "--file", next, "--json")
	results, err := testbeds.JSONLines[struct {
		Node     string                `json:"node"`
		Status   string                `json:"status"`
		Revision uint64                `json:"revision"`
		Answer   *linkproto.PlanAnswer `json:"answer"`
	}](r.Stdout)
	if r.Code != 0 || err != nil || len(results) != 1 || results[0].Status != "planned" || results[0].Revision != 1 || len(results[0].Answer.Steps) != 4 {
		t.Errorf("meshctl plan --json: %v: %s", err, r)
	}

	// Nothing changed on any machine, and nothing was declared.
	for _, h := range []*testbeds.Host{web1, web2} {
		if got := readRoot(t, h, "/etc/motd"); got != "one\n" {
			t.Errorf("%s: /etc/motd holds %q after plans; want it unchanged", h.Name, got)
		}
		if _, err := os.Stat(filepath.Join(h.Root, "etc/app/new.conf")); !os.IsNotExist(err) {
			t.Errorf("%s: a planned file was created: %v", h.Name, err)
		}
		if got := kindCount(h, event.PlanAnswered); got != 2 {
			t.Errorf("%s: %d plan.answered records for two plans, want 2", h.Name, got)
		}
		if got := kindCount(h, event.DeclarationReceived); got != before[h.Name+"/received"] {
			t.Errorf("%s: %d declarations received after plans, want %d", h.Name, got, before[h.Name+"/received"])
		}
		if got := kindCount(h, event.ReconcileStarted); got != before[h.Name+"/reconciles"] {
			t.Errorf("%s: %d reconciles started after plans, want %d", h.Name, got, before[h.Name+"/reconciles"])
		}
	}
	if _, err := os.Stat(filepath.Join(db.Root, "etc/motd")); !os.IsNotExist(err) {
		t.Errorf("db-1: a planned file was created: %v", err)
	}
	if got := kindCount(db, event.PlanAnswered); got != 2 {
		t.Errorf("db-1: %d plan.answered records, want 2", got)
	}
	// The record names the plan, not the document.
	for _, rec := range kindsOf(web1.Records(), event.PlanAnswered) {
		var p event.PlanAnsweredPayload
		if err := json.Unmarshal(rec.Payload, &p); err != nil || p.Digest == "" || p.Operator == "" || strings.Contains(string(rec.Payload), "two\\n") {
			t.Errorf("plan.answered: %s", rec.Payload)
		}
	}
}

// TestForgedPlanRequestsAreRefused: a plan request that is unsigned,
// signed by another key, signed as a push, or for another node is refused
// with its reason, journaled as link.refused, and changes nothing; what
// the broker could send, a forger could.
func TestForgedPlanRequestsAreRefused(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start()
	b.MustMeshctl("declare", "web-1", b.Declare("web-1", 1, testbeds.Files{"/etc/motd": "one\n"}))
	nc, err := nats.Connect(b.URL(), nats.UserCredentials(b.CredsFile()), nats.RootCAs(b.CAFile()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	key, err := b.DeclarationKey()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := linkproto.NewSigningKey()
	doc := `{"mesh":"home","node":"web-1","revision":2,"resources":[{"file":{"path":"/etc/motd","content":"forged\n"}}]}`
	request := func(node string, sign func(*linkproto.PlanRequest) error) []byte {
		p := linkproto.PlanRequest{Protocol: linkproto.ProtocolVersion, Mesh: "home", Node: node, Revision: 2, Document: json.RawMessage(doc), Operator: "attacker"}
		if sign != nil {
			if err := sign(&p); err != nil {
				t.Fatal(err)
			}
		}
		return linkproto.Marshal(p)
	}
	asPush := func(p *linkproto.PlanRequest) error {
		d := linkproto.Declaration(*p)
		err := d.Sign(key)
		p.Signer, p.Signature = d.Signer, d.Signature
		return err
	}
	refusedBefore := kindCount(h, event.LinkRefused)
	for _, c := range []struct {
		name, reason string
		body         []byte
	}{
		{"unsigned", "unsigned", request("web-1", nil)},
		{"another key", "does not trust", request("web-1", func(p *linkproto.PlanRequest) error { return p.Sign(otherKey) })},
		{"a push's signature", "bad signature", request("web-1", asPush)},
		{"another node", "another node", request("web-2", func(p *linkproto.PlanRequest) error { return p.Sign(key) })},
	} {
		m, err := nc.Request(linkproto.PlanSubject(testbeds.Mesh, "web-1"), c.body, 5*time.Second)
		if err != nil {
			t.Errorf("%s: no answer: %v", c.name, err)
			continue
		}
		var a linkproto.PlanAnswer
		if err := linkproto.Decode(m.Data, linkproto.MaxPlanAnswerSize, &a); err != nil || !strings.Contains(a.Refused, c.reason) || len(a.Steps) != 0 {
			t.Errorf("%s: answer %s, want refused with %q", c.name, m.Data, c.reason)
		}
	}
	// A plan's signature does not make a push either.
	planSigned := request("web-1", func(p *linkproto.PlanRequest) error { return p.Sign(key) })
	m, err := nc.Request(linkproto.DeclarationSubject(testbeds.Mesh, "web-1"), planSigned, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ack linkproto.Ack
	if err := json.Unmarshal(m.Data, &ack); err != nil || ack.Accepted || !strings.Contains(ack.Reason, "bad signature") {
		t.Errorf("a plan request pushed as a declaration: ack %s, want refused", m.Data)
	}
	if !h.Running() {
		t.Fatal("the host died of a forged plan request")
	}
	if got := readRoot(t, h, "/etc/motd"); got != "one\n" {
		t.Errorf("/etc/motd holds %q, want it unchanged", got)
	}
	if got := kindCount(h, event.PlanAnswered); got != 0 {
		t.Errorf("%d plan.answered for forged requests, want 0", got)
	}
	if got := kindCount(h, event.LinkRefused) - refusedBefore; got != 5 {
		t.Errorf("%d link.refused for 5 forged messages, want 5", got)
	}
}

// TestPlanGate: meshctl plan is the gate a rollout follows. A node whose
// plan foresees a failure (a parent directory that does not exist there)
// makes it exit 1, named in the summary and on stderr; two nodes whose
// rendered contents differ are two plans, though their steps are the
// same, each shown with its content diff; and once the machine is fixed
// the same plan exits 0, so `meshctl plan … && meshctl rollout …` goes on.
func TestPlanGate(t *testing.T) {
	b := beds(t)
	var hosts []*testbeds.Host
	for i, tier := range []string{"a", "a", "b", "a"} {
		h := b.AddHost(fmt.Sprintf("web-%d", i+1))
		h.Start()
		b.MustMeshctl("label", h.Name, "role=web", "tier="+tier)
		if i < 3 {
			if err := os.MkdirAll(filepath.Join(h.Root, "srv"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		hosts = append(hosts, h)
	}
	writeProfile(t, b, "app", "resources:\n  - file: {path: /srv/app.conf, content: \"tier ${label.tier}\\n\"}\n  - file: {path: /etc/motd, content: \"hello\\n\"}\n", "--select", "role=web")

	r := b.Meshctl("plan", "--select", "role=web")
	if r.Code != 1 {
		t.Fatalf("with web-4 foreseeing a failure: got %s, want exit 1", r)
	}
	for _, want := range []string{
		"2 nodes: 2 to change, 0 unchanged\n  web-1, web-2\n",
		"1 node: 2 to change, 0 unchanged\n  web-3\n",
		"1 node: 2 to change, 0 unchanged, 1 foreseen to fail\n  web-4\n",
		"parent directory does not exist: declare the directory /srv",
		"    --- /dev/null\n    +++ /srv/app.conf\n    @@ -0,0 +1 @@\n    +tier b\n",
		"    +tier a\n",
		"4 nodes: 3 planned (2 plans), 1 foresees failures: web-4\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("meshctl plan: the output lacks %q:\n%s", want, r.Stdout)
		}
	}
	if !strings.Contains(r.Stderr, "a plan foresees failures: web-4") {
		t.Errorf("meshctl plan: stderr %q, want it to name web-4", r.Stderr)
	}
	r = b.Meshctl("plan", "--select", "role=web", "--json")
	if r.Code != 1 || !strings.Contains(r.Stdout, `"failures":["file:/srv/app.conf"]`) {
		t.Errorf("meshctl plan --json: got %s, want exit 1 and web-4's failures", r)
	}

	// The machine fixed, the plan is clean: the gate opens.
	if err := os.MkdirAll(filepath.Join(hosts[3].Root, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = b.Meshctl("plan", "--select", "role=web")
	if r.Code != 0 || !strings.Contains(r.Stdout, "4 nodes: 4 planned (2 plans)\n") {
		t.Errorf("a clean plan: got %s, want exit 0 and 4 planned", r)
	}
	if got := readRoot(t, hosts[0], "/srv/app.conf"); !strings.Contains(got, "no such file") {
		t.Errorf("web-1: /srv/app.conf holds %q after plans; want it absent", got)
	}
}

// TestMeshctlJournalFilters: meshctl journal narrows a real node's records
// in the events stream as mesh-host journal narrows its own, by --resource
// and --kind, in the table and as JSON lines, from --since on.
func TestMeshctlJournalFilters(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start()
	b.MustMeshctl("declare", h.Name, b.Declare(h.Name, 1, testbeds.Files{"/etc/motd": "one\n", "/etc/app/app.conf": "a=1\n"}))
	testbeds.Eventually(t, 30*time.Second, "the node's applies in the events stream", func() error {
		if out := b.MustMeshctl("journal", h.Name, "--kind", "resource.applied"); strings.Count(out, "resource.applied") < 3 {
			return fmt.Errorf("not yet:\n%s", out)
		}
		return nil
	})
	out := b.MustMeshctl("journal", h.Name, "--resource", "file:/etc/motd", "--kind", "resource.applied", "--kind", "drift.observed")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "resource.applied") || !strings.Contains(lines[1], "file:/etc/motd") {
		t.Errorf("journal --resource --kind: got\n%s\nwant the header and file:/etc/motd's one apply", out)
	}
	out = b.MustMeshctl("journal", h.Name, "--resource", "file:/etc/motd", "--json")
	records, err := testbeds.JSONLines[event.Record](out)
	if err != nil || len(records) == 0 {
		t.Fatalf("journal --resource --json: %v:\n%s", err, out)
	}
	for _, r := range records {
		if r.Resource != "file:/etc/motd" {
			t.Errorf("journal --resource file:/etc/motd --json printed a record of %q", r.Resource)
		}
	}
	if out := b.MustMeshctl("journal", h.Name, "--kind", "resource.applied", "--since", fmt.Sprint(records[len(records)-1].Seq+1)); strings.Contains(out, "file:/etc/motd") {
		t.Errorf("journal --kind --since past motd's apply still shows it:\n%s", out)
	}
	if r := b.Meshctl("journal", h.Name, "--why", "file:/etc/motd", "--kind", "resource.applied"); r.Code != 2 || !strings.Contains(r.Stderr, "--why takes no other filter") {
		t.Errorf("journal --why with --kind: got %s, want refused", r)
	}
}
