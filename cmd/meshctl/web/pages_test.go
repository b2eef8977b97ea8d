package web

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
)

// hostile are what a node may say in the hope that a page runs it.
var hostile = []string{
	`<img src=x onerror=alert(1)>`,
	`"><script>alert(2)</script>`,
	`javascript:alert(3)`,
	`</text><script>alert(4)</script>`,
}

const (
	testDigest  = "sha256:0f4e5a1c9d2b7a3e0f4e5a1c9d2b7a3e0f4e5a1c9d2b7a3e0f4e5a1c9d2b7a3e"
	otherDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
)

// withHostNames journals, as a node's host would, a declaration of two
// resources, a failed apply of one, and a drift of the other repaired.
func (n *fakeNode) withHistory(hostname, ok, bad, failure string) {
	decl := n.journal(
		event.New(event.HostFacts, 0, "", event.HostFactsPayload{Hostname: hostname, OSID: "debian", Arch: "amd64", Cores: 2}),
		event.New(event.DeclarationReceived, 0, "", event.DeclarationReceivedPayload{Revision: 1, Digest: testDigest, Source: "push", Operator: "alice",
			Resources: []event.DeclaredResource{{ID: ok, SpecDigest: testDigest}, {ID: bad, SpecDigest: otherDigest}}}),
	)[1]
	start := n.journal(event.New(event.ReconcileStarted, decl.Seq, "", event.ReconcileStartedPayload{Trigger: event.TriggerPushed, Revision: 1}))[0]
	n.journal(
		event.New(event.ResourceApplied, start.Seq, ok, event.ResourceAppliedPayload{Action: event.ActionCreate, SpecDigest: testDigest}),
		event.New(event.ResourceApplied, start.Seq, bad, event.ResourceAppliedPayload{Action: event.ActionFailed, Error: failure}),
		event.New(event.ReconcileCompleted, start.Seq, "", event.ReconcileCompletedPayload{Trigger: event.TriggerPushed, Revision: 1, Result: event.ResultFailed, Changed: 1, Failed: 1}),
	)
	drift := n.journal(event.New(event.DriftObserved, 0, ok, event.DriftObservedPayload{Differs: []string{"content"}, Wanted: testDigest, Seen: otherDigest}))[0]
	n.journal(event.New(event.ResourceApplied, drift.Seq, ok, event.ResourceAppliedPayload{Action: event.ActionUpdate, SpecDigest: testDigest}))
}

// quoted is an attribute's value; handler an attribute that runs script,
// once the values are taken out.
var (
	quoted  = regexp.MustCompile(`"[^"]*"`)
	handler = regexp.MustCompile(`<[^>]*\son[a-z]+=`)
)

// linkPattern finds a page's links to a node's --why.
var linkPattern = regexp.MustCompile(`href="(/nodes/[^"]*/why\?resource=[^"]*)"`)

func TestWebPagesShowWhatNodesSayAsText(t *testing.T) {
	b := newBed(t)
	okID, badID := "file:/etc/"+hostile[1], "file:/srv/"+hostile[3]
	web1 := b.node("web-1")
	web1.withHistory(hostile[0], okID, badID, "refused: "+hostile[0]+" "+hostile[3])
	b.label("web-1", labels.Set{"role": hostile[0], "dc": hostile[3], hostile[1]: hostile[2]})
	web1.report(hostile[3], hostile[2])
	web2 := b.node("web-2")
	web2.withHistory("web-2.example", "file:/etc/motd", "file:/etc/app.conf", "no space left")
	web2.report("sha256:"+strings.Repeat("ab", 32), "next")

	pages := map[string]string{}
	for _, path := range []string{"/", "/?select=" + url.QueryEscape(hostile[0]), "/nodes/web-1", "/api/nodes", "/api/nodes/web-1", "/rollouts"} {
		_, pages[path] = b.get(path)
	}
	_, node := b.get("/nodes/web-1")
	links := linkPattern.FindAllStringSubmatch(node, -1)
	if len(links) == 0 {
		t.Fatalf("the node page links no resource to its why:\n%s", node)
	}
	for _, l := range links {
		path := html.UnescapeString(l[1])
		status, body := b.get(path)
		if status != 200 || !strings.Contains(body, `<section id="why">`) {
			t.Errorf("%s: %d, want 200 with section#why:\n%s", path, status, body)
		}
		pages[path] = body
	}
	for path, body := range pages {
		for _, h := range hostile {
			if h != hostile[2] && strings.Contains(body, h) {
				t.Errorf("%s shows %q unescaped", path, h)
			}
		}
		// The page's own script is its only one, and no tag has a
		// handler or a javascript: link.
		if n := strings.Count(body, "<script"); n > 1 {
			t.Errorf("%s holds %d script tags", path, n)
		}
		if m := handler.FindString(quoted.ReplaceAllString(body, `""`)); m != "" || strings.Contains(body, `="javascript:`) {
			t.Errorf("%s holds %q", path, m)
		}
	}
	// What was said is shown, as text.
	for _, want := range []string{
		`<strong id="hostname">&lt;img src=x onerror=alert(1)&gt;</strong>`,
		`<p id="verify" class="verify verify-holds">holds: replay of 8 records`,
		`class="failing"`, `<span class="reason">refused: &lt;img src=x onerror=alert(1)&gt; &lt;/text&gt;&lt;script&gt;alert(4)&lt;/script&gt;</span>`,
		`<span class="kind">drift.observed</span>`,
	} {
		if !strings.Contains(node, want) {
			t.Errorf("the node page lacks %q:\n%s", want, node)
		}
	}
	fleet := pages["/"]
	for _, want := range []string{
		`<tr class="node" data-node="web-1"><td class="name"><a href="/nodes/web-1">web-1</a></td>`,
		`<td class="failing">1</td>`,
		`data-state="failed"`,
		`found (2)`, `repaired (2)`,
		// A version that is no digest is cut to 12 bytes, as meshctl nodes cuts it.
		`<text class="label" x="185" y="16" text-anchor="end">&lt;/text&gt;&lt;scri</text>`,
		`<td class="version">&lt;/text&gt;&lt;scri</td>`,
	} {
		if !strings.Contains(fleet, want) {
			t.Errorf("the fleet page lacks %q:\n%s", want, fleet)
		}
	}
}

func TestWebShowsNoSecretNorDigest(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	secrets, err := b.a.Secrets()
	if err != nil {
		t.Fatal(err)
	}
	const value = "hunter2-the-database-password"
	if err := secrets.Set("db-password", []byte(value)); err != nil {
		t.Fatal(err)
	}
	b.c.Secrets = secrets
	keys, err := b.js.KeyValue(ctx, linkproto.SealKeysBucket)
	if err != nil {
		t.Fatal(err)
	}
	sealKey := curveKey(t)
	if err := store.PutSealKey(ctx, keys, testMesh, "db-1", sealKey); err != nil {
		t.Fatal(err)
	}
	d, err := declaration.ParseYAML("db-1.yaml", []byte("mesh: home\nnode: db-1\nrevision: 1\nresources:\n  - file: {path: /etc/db.conf, content: {secret: db-password}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Nobody answers the push: the node is offline, and the declaration
	// is stored, sealed, for its next hello.
	_ = b.c.Declare(ctx, io.Discard, "db-1", d, client.DeclareOptions{PushTimeout: 200 * time.Millisecond})
	desired, err := store.New(b.js).Desired(ctx, testMesh)
	if err != nil {
		t.Fatal(err)
	}
	push, err := desired.Push(ctx, "db-1")
	if err != nil || push == nil {
		t.Fatalf("the stored push: %v %v", push, err)
	}
	sealed := regexp.MustCompile(`"sealed":"([^"]+)"`).FindStringSubmatch(string(push.Document))
	if sealed == nil {
		t.Fatalf("the stored declaration holds no sealed secret: %s", push.Document)
	}
	// The node journals it as it was pushed, document and all.
	db := b.node("db-1")
	decl := db.journal(event.New(event.DeclarationReceived, 0, "", event.DeclarationReceivedPayload{
		Revision: 1, Digest: testDigest, Source: "push", Document: push.Document, Operator: push.Operator, Signer: push.Signer, Signature: push.Signature,
		Resources: []event.DeclaredResource{{ID: "file:/etc/db.conf", SpecDigest: otherDigest}},
	}))[0]
	start := db.journal(event.New(event.ReconcileStarted, decl.Seq, "", event.ReconcileStartedPayload{Trigger: event.TriggerPushed, Revision: 1}))[0]
	db.journal(
		event.New(event.ResourceApplied, start.Seq, "file:/etc/db.conf", event.ResourceAppliedPayload{Action: event.ActionCreate, SpecDigest: otherDigest}),
		event.New(event.ReconcileCompleted, start.Seq, "", event.ReconcileCompletedPayload{Trigger: event.TriggerPushed, Revision: 1, Result: event.ResultConverged, Changed: 1}),
	)
	db.report("v1", "v1")
	for _, path := range []string{"/", "/nodes/db-1", "/nodes/db-1/why?resource=file%3A%2Fetc%2Fdb.conf", "/api/nodes", "/api/nodes/db-1"} {
		status, body := b.get(path)
		if status != 200 {
			t.Errorf("%s: %d", path, status)
		}
		for _, secret := range []string{value, sealed[1], "sha256:", push.Signature} {
			if strings.Contains(body, secret) {
				t.Errorf("%s shows %q", path, secret)
			}
		}
		if path == "/nodes/db-1" && !strings.Contains(body, "file:/etc/db.conf") {
			t.Errorf("%s does not show the resource:\n%s", path, body)
		}
	}
}

func TestWebFleetFiltersAndPages(t *testing.T) {
	b := newBed(t)
	const nodes = 205
	seedFleet(t, b, nodes)
	rows := regexp.MustCompile(`<tr class="node" data-node="([^"]+)"`)
	for _, c := range []struct {
		path            string
		status, rows    int
		first           string
		prev, next, bad bool
	}{
		{path: "/", status: 200, rows: 100, first: "node-00000", next: true},
		{path: "/?page=2", status: 200, rows: 100, first: "node-00100", prev: true, next: true},
		{path: "/?page=3", status: 200, rows: 5, first: "node-00200", prev: true},
		{path: "/?page=99", status: 200, rows: 5, first: "node-00200", prev: true},
		{path: "/?select=role%3Ddb", status: 200, rows: 100, first: "node-00001", next: true},
		{path: "/?select=role%3Ddb&page=2", status: 200, rows: 2, first: "node-00201", prev: true},
		{path: "/?select=role%3D%3D%3Cscript%3E", status: 400, rows: 0, bad: true},
	} {
		status, body := b.get(c.path)
		got := rows.FindAllStringSubmatch(body, -1)
		if status != c.status || len(got) != c.rows {
			t.Errorf("%s: %d with %d rows, want %d with %d", c.path, status, len(got), c.status, c.rows)
			continue
		}
		if c.rows > 0 && got[0][1] != c.first {
			t.Errorf("%s: first %s, want %s", c.path, got[0][1], c.first)
		}
		if strings.Contains(body, `rel="prev"`) != c.prev || strings.Contains(body, `rel="next"`) != c.next {
			t.Errorf("%s: prev %v next %v, want %v %v", c.path, strings.Contains(body, `rel="prev"`), strings.Contains(body, `rel="next"`), c.prev, c.next)
		}
		if strings.Contains(body, `id="select-problem"`) != c.bad || strings.Contains(body, "<script>") {
			t.Errorf("%s: problem shown %v, want %v", c.path, !c.bad, c.bad)
		}
		for _, want := range []string{`<form id="filter" method="get"`, `<table id="nodes">`, `<div id="counts">`, `<svg id="versions-chart"`, `<svg id="drift-chart"`} {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %q", c.path, want)
			}
		}
	}
	_, body := b.get("/?select=role%3Ddb")
	if !strings.Contains(body, `<span class="count-state state-ok" data-state="ok">102 ok</span>`) {
		t.Errorf("the counts of role=db:\n%s", body)
	}
	if !strings.Contains(body, `href="/?page=2&amp;select=role%3Ddb"`) {
		t.Errorf("the next page keeps the selector:\n%s", body)
	}
}

func TestWebNotFound(t *testing.T) {
	b := newBed(t)
	b.node("web-1").report("v1", "v1")
	for _, path := range []string{"/nodes/nobody", "/nodes/NOT%20A%20NAME", "/nodes/nobody/why?resource=x", "/nodes/web-1/why?resource=file%3A%2Fnone", "/rollouts/none", "/api/nodes/nobody", "/api/rollouts/none", "/no/such/page"} {
		if status, body := b.get(path); status != 404 {
			t.Errorf("%s: %d, want 404:\n%s", path, status, body)
		}
	}
	if status, body := b.get("/nodes/web-1"); status != 200 || !strings.Contains(body, "<h1>web-1</h1>") {
		t.Errorf("/nodes/web-1: %d\n%s", status, body)
	}
	// The icon a browser asks for by itself is there, token or not.
	resp, err := b.srv.Client().Get(b.srv.URL + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/svg+xml" {
		t.Errorf("/favicon.ico: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
}

func TestWebRolloutIsDrawnAndPolled(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	rs, err := store.New(b.js).Rollouts(ctx, testMesh)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	r := &rollout.Rollout{ID: "r-1", Mesh: testMesh, Kind: rollout.KindProfiles, Selector: "role=web", Operator: "alice", Created: now, Updated: now,
		Canary: 1, MaxInFlight: 2, HaltOnFailure: true, State: rollout.Halted, HaltedAt: now, Reason: "canary web-1 failed: " + hostile[0],
		Nodes: []rollout.Node{
			{Node: "web-1", Wave: 0, Step: rollout.StepFailed, Revision: 2, Reason: hostile[3]},
			{Node: "web-2", Wave: 1, Step: rollout.StepPending},
			{Node: "web-3", Wave: 1, Step: rollout.StepPending},
		}}
	if err := rs.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	_, list := b.get("/rollouts")
	if !strings.Contains(list, `<tr class="rollout" data-rollout="r-1"><td class="id"><a href="/rollouts/r-1">r-1</a>`) {
		t.Errorf("the rollouts list:\n%s", list)
	}
	status, page := b.get("/rollouts/r-1")
	for _, want := range []string{
		`<main data-live="/api/rollouts/r-1">`, `<span id="rollout-state" class="rollout-state state-halted">halted</span>`,
		`<section id="waves">`, `<div class="wave" data-wave="0">`, `<div class="wave" data-wave="1">`, `<svg class="progress"`,
		`<li class="step" data-node="web-1" data-step="failed"><a href="/nodes/web-1">web-1</a> <span class="step-state step-failed">failed</span>`,
		`<li class="step" data-node="web-3" data-step="pending">`, `<h2>wave 0 (canary)</h2>`, `<a href="/rollouts">Rollouts</a>`,
	} {
		if status != 200 || !strings.Contains(page, want) {
			t.Errorf("the rollout page (%d) lacks %q:\n%s", status, want, page)
		}
	}
	for _, h := range []string{hostile[0], hostile[3]} {
		if strings.Contains(page, h) {
			t.Errorf("the rollout page shows %q", h)
		}
	}
	// What the page's script polls follows the record.
	got, err := rs.Get(ctx, "r-1")
	if err != nil {
		t.Fatal(err)
	}
	got.State, got.Nodes[0].Step = rollout.Aborted, rollout.StepReverted
	if err := rs.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	_, body := b.get("/api/rollouts/r-1")
	var v struct {
		Rollout rollout.Rollout `json:"rollout"`
		Waves   []struct {
			N        int `json:"n"`
			Progress struct {
				Segments []struct {
					Step    string `json:"step"`
					N, X, W int
				} `json:"segments"`
			} `json:"progress"`
		} `json:"waves"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if v.Rollout.State != rollout.Aborted || v.Rollout.Nodes[0].Step != rollout.StepReverted || len(v.Waves) != 2 {
		t.Errorf("/api/rollouts/r-1: %s", body)
	}
	if s := fmt.Sprint(v.Waves[0].Progress.Segments); !strings.Contains(s, "{reverted 1 0 400}") {
		t.Errorf("wave 0's bar: %s", s)
	}
	if _, body := b.get("/api/rollouts"); !strings.Contains(body, `"id":"r-1"`) || !strings.Contains(body, `"state":"aborted"`) {
		t.Errorf("/api/rollouts: %s", body)
	}
}
