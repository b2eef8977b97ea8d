package linkproto_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

func TestSubjectsStayUnderTheNodesOwnPermissions(t *testing.T) {
	const mesh, node = "home", "web-1"
	down := []string{linkproto.DeclarationSubject(mesh, node), linkproto.PlanSubject(mesh, node), linkproto.InboxPrefix(mesh, node) + ".x"}
	up := []string{linkproto.HelloSubject(mesh, node), linkproto.HeartbeatSubject(mesh, node), linkproto.EventSubject(mesh, node, 1), linkproto.EventSubject(mesh, node, 1<<63), linkproto.SyncSubject(mesh, node)}
	for _, s := range down {
		if !matches(linkproto.NodeSubscribe(mesh, node), s) {
			t.Errorf("%s is outside the node's subscribe permission %s", s, linkproto.NodeSubscribe(mesh, node))
		}
		if matches(linkproto.NodePublish(mesh, node), s) {
			t.Errorf("the node may publish on its own down subject %s", s)
		}
	}
	for _, s := range up {
		if !matches(linkproto.NodePublish(mesh, node), s) {
			t.Errorf("%s is outside the node's publish permission %s", s, linkproto.NodePublish(mesh, node))
		}
		if matches(linkproto.NodeSubscribe(mesh, node), s) {
			t.Errorf("the node may subscribe to its own up subject %s", s)
		}
	}
	// Another node's subjects are outside both.
	for _, s := range []string{linkproto.DeclarationSubject(mesh, "web-2"), linkproto.EventSubject(mesh, "web-2", 1), linkproto.NodeEvents(mesh, "web-2"), linkproto.EventSubject("other", node, 1), linkproto.DeclarationSubject("other", node), linkproto.PlanSubject(mesh, "web-2")} {
		if matches(linkproto.NodeSubscribe(mesh, node), s) || matches(linkproto.NodePublish(mesh, node), s) {
			t.Errorf("node %s's permissions cover %s", node, s)
		}
	}
	if !matches(linkproto.AnyMeshEvents, linkproto.EventSubject(mesh, node, 7)) || !matches(linkproto.NodeEvents(mesh, node), linkproto.EventSubject(mesh, node, 7)) {
		t.Error("the events stream does not capture a node's events subject")
	}
	// A node's wildcard selects its own records only.
	if matches(linkproto.NodeEvents(mesh, node), linkproto.EventSubject(mesh, "web-2", 7)) || matches(linkproto.NodeEvents(mesh, "web"), linkproto.EventSubject(mesh, node, 7)) {
		t.Error("a node's events wildcard matches another node's record")
	}
	if !matches(linkproto.AnyMeshHeartbeats, linkproto.HeartbeatSubject(mesh, node)) || !matches(linkproto.AllHeartbeats(mesh), linkproto.HeartbeatSubject(mesh, node)) {
		t.Error("the heartbeats stream does not capture a node's heartbeat subject")
	}
	if !matches(linkproto.AllHellos(mesh), linkproto.HelloSubject(mesh, node)) || !matches(linkproto.AllSyncs(mesh), linkproto.SyncSubject(mesh, node)) {
		t.Error("the control service does not hear a node's hello or sync")
	}
	m, n, err := linkproto.NodeOf(linkproto.HeartbeatSubject(mesh, node))
	if err != nil || m != mesh || n != node {
		t.Errorf("NodeOf = %q, %q, %v", m, n, err)
	}
	for _, bad := range []string{"mesh.home.up", "x.home.up.n.hello", "mesh.home.sideways.n.hello", "mesh.Home.up.n.hello", "mesh.home.up.*.hello"} {
		if _, _, err := linkproto.NodeOf(bad); err == nil {
			t.Errorf("NodeOf(%q) accepted it", bad)
		}
	}
}

// matches is NATS subject matching: * one token, > the rest.
func matches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

func TestNamesCannotWidenPermissions(t *testing.T) {
	for _, ok := range []string{"a", "web-1", "db_2", "0", strings.Repeat("a", 63)} {
		if err := linkproto.ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "*", ">", "a.b", "a b", "Web", "-a", "_a", "a*", strings.Repeat("a", 64), "é"} {
		if err := linkproto.ValidName(bad); !errors.Is(err, linkproto.ErrInvalidName) {
			t.Errorf("ValidName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestDecodeRefusesWhatItCannotTrust(t *testing.T) {
	good := `{"protocol":1,"mesh":"home","node":"n","revision":3,"document":{"mesh":"home","node":"n","revision":3,"resources":[]}}`
	d, err := linkproto.DecodeDeclaration([]byte(good), "home", "n")
	if err != nil || d.Revision != 3 {
		t.Fatalf("DecodeDeclaration(good) = %+v, %v", d, err)
	}
	withExtra := strings.Replace(good, `"protocol":1`, `"protocol":1,"added_later":{"x":1}`, 1)
	if _, err := linkproto.DecodeDeclaration([]byte(withExtra), "home", "n"); err != nil {
		t.Errorf("an unknown field is refused: %v", err)
	}
	for _, c := range []struct {
		name, data string
		want       error
		msg        string
	}{
		{"not json", "hello", linkproto.ErrMalformed, "malformed message: invalid character 'h'"},
		{"empty", "", linkproto.ErrMalformed, "malformed message: EOF"},
		{"two values", good + good, linkproto.ErrMalformed, "data after the message"},
		{"wrong type", `{"protocol":"1"}`, linkproto.ErrMalformed, "cannot unmarshal string"},
		{"no protocol", strings.Replace(good, `"protocol":1,`, ``, 1), linkproto.ErrVersion, "the message has no protocol field"},
		{"newer protocol", strings.Replace(good, `"protocol":1`, `"protocol":99`, 1), linkproto.ErrVersion, "protocol 99 is newer than this end's 3"},
		{"other node", strings.Replace(good, `"node":"n"`, `"node":"m"`, 1), linkproto.ErrWrongNode, "the declaration is for home/m, this is home/n"},
		{"other mesh", strings.Replace(good, `"mesh":"home"`, `"mesh":"work"`, 1), linkproto.ErrWrongNode, "for work/n"},
		{"no revision", strings.Replace(good, `"revision":3,"document"`, `"document"`, 1), linkproto.ErrMalformed, "revision: must be at least 1"},
		{"no document", `{"protocol":1,"mesh":"home","node":"n","revision":3}`, linkproto.ErrMalformed, "document: required"},
		{"null document", `{"protocol":1,"mesh":"home","node":"n","revision":3,"document":null}`, linkproto.ErrMalformed, "document: required"},
		{"oversized", `{"protocol":1,"pad":"` + strings.Repeat("x", linkproto.MaxDeclarationSize) + `"}`, linkproto.ErrTooLarge, "the limit is 8388608"},
	} {
		_, err := linkproto.DecodeDeclaration([]byte(c.data), "home", "n")
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: err = %v, want %v containing %q", c.name, err, c.want, c.msg)
		}
	}
	var h linkproto.Heartbeat
	if err := linkproto.Decode([]byte(`{"protocol":1,"pad":"`+strings.Repeat("x", linkproto.MaxReportSize)+`"}`), linkproto.MaxReportSize, &h); !errors.Is(err, linkproto.ErrTooLarge) {
		t.Errorf("an oversized heartbeat: %v", err)
	}
}

func TestHeartbeatSumsUpTheState(t *testing.T) {
	done := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s := projector.State{
		Head:          40,
		Desired:       &projector.Desired{Revision: 7},
		LastReconcile: &projector.Reconcile{Revision: 6, Result: event.ResultFailed, Completed: done},
		Owned: map[string]projector.Owned{
			"file:/a": {LastOutcome: event.ActionCreate},
			"file:/b": {LastOutcome: event.ActionUpdate, Drifted: true},
			"file:/c": {LastOutcome: event.ActionFailed},
		},
		Failing:   map[string]projector.Failure{"package:x": {Error: "not found"}},
		LastGood:  &projector.LastGood{Revision: 5},
		KnownGood: "v1",
		Bad:       []string{"v2"},
	}
	h := linkproto.HeartbeatOf(s)
	want := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Head: 40, Desired: 7, Applied: 6, Result: event.ResultFailed, LastReconcile: done,
		Owned: 3, Drifted: 1, Failed: 2, LastGood: 5, KnownGood: "v1", Bad: []string{"v2"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("HeartbeatOf = %+v\nwant %+v", h, want)
	}
	h.Interval, h.Uptime = linkproto.Duration(time.Minute), linkproto.Duration(90*time.Second)
	var back linkproto.Heartbeat
	if err := linkproto.Decode(linkproto.Marshal(h), linkproto.MaxReportSize, &back); err != nil || !reflect.DeepEqual(back, h) {
		t.Errorf("heartbeat round trip = %+v, %v", back, err)
	}
	if !strings.Contains(string(linkproto.Marshal(h)), `"interval":"1m0s"`) {
		t.Errorf("durations travel as strings: %s", linkproto.Marshal(h))
	}
}

func TestEventBodyOmitsOnlyWhatIsTooLarge(t *testing.T) {
	small := event.New(event.LinkUp, 3, "", event.LinkPayload{Broker: "nats://a"})
	small.Seq = 9
	b, err := linkproto.EventBody(small)
	if err != nil {
		t.Fatal(err)
	}
	var got event.Record
	if err := json.Unmarshal(b, &got); err != nil || got.Seq != 9 || string(got.Payload) != string(small.Payload) {
		t.Errorf("small record = %+v, %v", got, err)
	}
	big := event.New(event.DeclarationReceived, 0, "", event.DeclarationReceivedPayload{Revision: 2, Document: make([]byte, linkproto.MaxEventSize)})
	big.Seq = 10
	b, err = linkproto.EventBody(big)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > linkproto.MaxEventSize {
		t.Errorf("body of %d bytes is over the limit", len(b))
	}
	// A declaration too large goes without its document, the rest kept:
	// the projection rebuilt upward from it is the one the node reports.
	var p event.DeclarationReceivedPayload
	if err := json.Unmarshal(b, &got); err != nil || got.Seq != 10 || got.Kind != event.DeclarationReceived ||
		!strings.Contains(string(got.Payload), `"document_omitted"`) || json.Unmarshal(got.Payload, &p) != nil || p.Revision != 2 || p.Document != nil {
		t.Errorf("big declaration = %.300s, %v", b, err)
	}
	// Anything else too large is omitted whole.
	huge := event.New(event.ReconcileStarted, 0, "", map[string]string{"plan": strings.Repeat("x", linkproto.MaxEventSize)})
	huge.Seq = 11
	if b, err = linkproto.EventBody(huge); err != nil || len(b) > linkproto.MaxEventSize || !strings.Contains(string(b), `"omitted"`) {
		t.Errorf("big record = %.300s, %v", b, err)
	}
}

func TestTokenRoundTripAndRefusals(t *testing.T) {
	key, _ := linkproto.NewSigningKey()
	pub, _ := key.PublicKey()
	ca, leaf := testCert(t, true), testCert(t, false)
	expires := time.Date(2026, 12, 4, 11, 0, 0, 0, time.UTC)
	tok := linkproto.Token{Protocol: linkproto.ProtocolVersion, ID: linkproto.NewTokenID(), Mesh: "home", Node: "web-1",
		URLs: []string{"tls://127.0.0.1:4222"}, CA: ca, SigningKey: pub, Expires: expires, Bootstrap: "eyJ0.eyJ1.c2ln"}
	sign := func(f func(*linkproto.Token)) string {
		c := tok
		c.URLs = append([]string(nil), tok.URLs...)
		f(&c)
		enc, err := c.Sign(key)
		if err != nil {
			t.Fatal(err)
		}
		return enc
	}
	enc := sign(func(*linkproto.Token) {})
	got, err := linkproto.ParseToken(" " + enc + "\n")
	if err != nil || got.Node != "web-1" || !got.Expires.Equal(expires) || got.URLs[0] != tok.URLs[0] || got.Encoded() != enc {
		t.Fatalf("ParseToken = %+v, %v", got, err)
	}
	if _, err := linkproto.VerifyToken(enc, pub, "home"); err != nil {
		t.Errorf("VerifyToken by its signer: %v", err)
	}
	other, _ := linkproto.NewSigningKey()
	otherPub, _ := other.PublicKey()
	if _, err := linkproto.VerifyToken(enc, otherPub, "home"); !errors.Is(err, linkproto.ErrUntrustedSigner) {
		t.Errorf("VerifyToken by another mesh's key: %v, want ErrUntrustedSigner", err)
	}
	if _, err := linkproto.VerifyToken(enc, pub, "work"); !errors.Is(err, linkproto.ErrWrongNode) {
		t.Errorf("VerifyToken for another mesh: %v, want ErrWrongNode", err)
	}
	if err := got.Expired(expires.Add(-time.Second)); err != nil {
		t.Errorf("a second before expiry: %v", err)
	}
	if err := got.Expired(expires); !errors.Is(err, linkproto.ErrTokenExpired) || !strings.Contains(err.Error(), "it expired at 2026-12-04T11:00:00Z") {
		t.Errorf("at expiry: %v", err)
	}
	if _, err := tok.Sign(other); err == nil {
		t.Error("a token signed by a key other than the one it names")
	}
	body, sig, _ := strings.Cut(strings.TrimPrefix(enc, "meshtoken2."), ".")
	for _, c := range []struct{ name, token, msg string }{
		{"no prefix", "abc", `does not start with "meshtoken2."`},
		{"version 1", "meshtoken1.abc", "a version 1 token"},
		{"no signature", "meshtoken2." + body, "no signature"},
		{"cut short", enc[:30] + "!", "was it cut short?"},
		{"signature of another", "meshtoken2." + body + "." + sig[:len(sig)-4] + "AAAA", "changed after it was issued"},
		{"newer", sign(func(t *linkproto.Token) { t.Protocol = 99 }), "protocol 99; this end speaks 3"},
		{"bad id", sign(func(t *linkproto.Token) { t.ID = "mesh.>" }), "id: "},
		{"no expiry", sign(func(t *linkproto.Token) { t.Expires = time.Time{} }), "expires: required"},
		{"no bootstrap", sign(func(t *linkproto.Token) { t.Bootstrap = "" }), "bootstrap: not a NATS user JWT"},
		{"no urls", sign(func(t *linkproto.Token) { t.URLs = nil }), "urls: no broker address"},
		{"bad url", sign(func(t *linkproto.Token) { t.URLs = []string{"http://x"} }), `"http://x" is not a broker address`},
		{"bad node", sign(func(t *linkproto.Token) { t.Node = "a.>" }), "node: invalid name"},
		{"no ca", sign(func(t *linkproto.Token) { t.CA = "" }), "ca: no certificate authority"},
		{"ca not pem", sign(func(t *linkproto.Token) { t.CA = "secret" }), "ca: not a PEM certificate"},
		{"ca not a ca", sign(func(t *linkproto.Token) { t.CA = leaf }), `ca: "test" is not a certificate authority`},
		{"two cas", sign(func(t *linkproto.Token) { t.CA = ca + ca }), "ca: more than one certificate"},
	} {
		_, err := linkproto.ParseToken(c.token)
		if !errors.Is(err, linkproto.ErrBadToken) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: err = %v, want ErrBadToken containing %q", c.name, err, c.msg)
		}
	}
}

func TestCredentialSignedForItsRequest(t *testing.T) {
	key, _ := linkproto.NewSigningKey()
	pub, _ := key.PublicKey()
	c := linkproto.Credential{Protocol: linkproto.ProtocolVersion, Node: "web-1", JWT: "a.b.c", Expires: time.Now(), Nonce: "n1"}
	if err := c.Sign(key, "home"); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(pub, "home", "web-1", "n1"); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	for name, f := range map[string]func(*linkproto.Credential) (mesh, node, nonce string){
		"another nonce": func(*linkproto.Credential) (string, string, string) { return "home", "web-1", "n2" },
		"another node":  func(*linkproto.Credential) (string, string, string) { return "home", "web-2", "n1" },
		"another mesh":  func(*linkproto.Credential) (string, string, string) { return "work", "web-1", "n1" },
		"JWT swapped": func(c *linkproto.Credential) (string, string, string) {
			c.JWT = "x.y.z"
			return "home", "web-1", "n1"
		},
		"refusal turned into credentials": func(c *linkproto.Credential) (string, string, string) {
			c.Refused = "no"
			return "home", "web-1", "n1"
		},
	} {
		cc := c
		mesh, node, nonce := f(&cc)
		if err := cc.Verify(pub, mesh, node, nonce); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

func TestEventSubjectRoundTripsAndIsUniquePerNodeAndSeq(t *testing.T) {
	seen := map[string]bool{}
	for _, node := range []string{"a", "a-1", "a1"} {
		for _, seq := range []uint64{1, 11, 111, 1<<64 - 1} {
			subj := linkproto.EventSubject("home", node, seq)
			if seen[subj] {
				t.Errorf("EventSubject %q repeats", subj)
			}
			seen[subj] = true
			m, n, s, err := linkproto.ParseEventSubject(subj)
			if err != nil || m != "home" || n != node || s != seq {
				t.Errorf("ParseEventSubject(%q) = %q, %q, %d, %v; want home, %s, %d", subj, m, n, s, err, node, seq)
			}
		}
	}
}

// Each record has one subject: any other spelling of its sequence is
// refused, or the stream's one-message-per-subject rule would store it
// twice.
func TestParseEventSubjectRefusesWhatEventSubjectWouldNotBuild(t *testing.T) {
	for _, bad := range []string{
		"mesh.home.up.a.events",                      // the legacy subject: no sequence
		"mesh.home.up.a.events.0",                    // journal sequences start at 1
		"mesh.home.up.a.events.07",                   // a leading zero: a second subject for record 7
		"mesh.home.up.a.events.+7",                   // a sign
		"mesh.home.up.a.events.-7",                   // a sign
		"mesh.home.up.a.events.7.8",                  // an extra token
		"mesh.home.up.a.events.x",                    // not a number
		"mesh.home.up.a.events.*",                    // a wildcard
		"mesh.home.up.a.events.>",                    // a wildcard
		"mesh.home.up.*.events.7",                    // a wildcard node
		"mesh.home.down.a.events.7",                  // the wrong direction
		"mesh.home.up.a.hello.7",                     // another kind
		"mesh.Home.up.a.events.7",                    // not a valid mesh name
		"mush.home.up.a.events.7",                    // not the mesh root
		"mesh.home.up.a.events.18446744073709551616", // past uint64
	} {
		if _, _, _, err := linkproto.ParseEventSubject(bad); !errors.Is(err, linkproto.ErrNotEventSubject) {
			t.Errorf("ParseEventSubject(%q): err = %v, want ErrNotEventSubject", bad, err)
		}
	}
}

// testCert is a self-signed certificate, PEM, a CA's when isCA.
func testCert(t *testing.T, isCA bool) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: isCA,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestReport: a report carries the state without the declaration's
// document, and its digest changes when the state does and only then.
func TestReport(t *testing.T) {
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s := projector.State{Head: 9, Desired: &projector.Desired{Revision: 2, Document: []byte(`{"big":"document"}`)},
		Owned: map[string]projector.Owned{"file:/a": {SpecDigest: "sha256:aa", LastOutcome: event.ActionCreate, Seq: 4}}}
	sent := linkproto.ReportOf("home", "web-1", s, at)
	r, digest := sent.Report, sent.Digest
	if r.State.Desired.Document != nil || s.Desired.Document == nil {
		t.Errorf("the report carries the document, or changed the state it was made of")
	}
	var back linkproto.Report
	if err := linkproto.Decode(linkproto.Marshal(r), linkproto.MaxDeclarationSize, &back); err != nil || !projector.Equal(back.State, r.State) {
		t.Errorf("report round trip: %v\n%v", err, projector.Diff(back.State, r.State))
	}
	if again := linkproto.ReportOf("home", "web-1", s, at.Add(time.Hour)).Digest; again != digest {
		t.Errorf("the digest changed with nothing but the time: %s, %s", digest, again)
	}
	s.Head = 10
	if changed := linkproto.ReportOf("home", "web-1", s, at).Digest; changed == digest {
		t.Errorf("the digest did not change with the state")
	}
}

// TestPlanAnswerFitsItsLimit: a plan of more resources than one answer
// holds keeps its first steps and counts the rest.
func TestPlanAnswerFitsItsLimit(t *testing.T) {
	a := linkproto.PlanAnswer{Protocol: linkproto.ProtocolVersion, Node: "n", Revision: 2}
	for i := range 20000 {
		a.Steps = append(a.Steps, linkproto.PlanStep{ID: fmt.Sprintf("file:/etc/app/%05d.conf", i), Action: event.ActionCreate, Differs: []string{"absent"}})
	}
	a.Fit()
	if n := len(linkproto.Marshal(a)); n > linkproto.MaxPlanAnswerSize {
		t.Fatalf("after Fit the answer is %d bytes; the limit is %d", n, linkproto.MaxPlanAnswerSize)
	}
	if a.Omitted == 0 || len(a.Steps)+a.Omitted != 20000 {
		t.Errorf("got %d steps and %d omitted, want them to add up to 20000 with some omitted", len(a.Steps), a.Omitted)
	}
	if a.Steps[0].ID != "file:/etc/app/00000.conf" {
		t.Errorf("the first step kept is %s, want the plan's first", a.Steps[0].ID)
	}
	var back linkproto.PlanAnswer
	if err := linkproto.Decode(linkproto.Marshal(a), linkproto.MaxPlanAnswerSize, &back); err != nil {
		t.Errorf("the fitted answer does not decode within its limit: %v", err)
	}
	small := linkproto.PlanAnswer{Protocol: linkproto.ProtocolVersion, Steps: []linkproto.PlanStep{{ID: "a", Action: event.ActionUpdate}}}
	small.Fit()
	if len(small.Steps) != 1 || small.Omitted != 0 {
		t.Errorf("a small answer was cut: %+v", small)
	}
}

// TestPlanAnswerDiffsAreBounded: one diff over MaxPlanDiffSize is cut at
// a line's end with a note saying how much more there was; an answer of
// many diffs leaves diffs out, from the end, before it drops a step.
func TestPlanAnswerDiffsAreBounded(t *testing.T) {
	long := strings.Repeat("+a line of the file\n", 2000)
	cut := linkproto.ClipDiff(long)
	if len(cut) > linkproto.MaxPlanDiffSize || !strings.Contains(cut, "diff cut: ") || !strings.HasPrefix(cut, "+a line of the file\n") {
		t.Errorf("a %d-byte diff clipped to %d bytes, ending %q", len(long), len(cut), cut[len(cut)-80:])
	}
	if body := cut[:strings.Index(cut, "\n… diff cut")]; !strings.HasSuffix(body, "of the file\n") {
		t.Errorf("the diff was cut inside a line")
	}
	if short := "+x\n"; linkproto.ClipDiff(short) != short {
		t.Errorf("a short diff was changed")
	}
	a := linkproto.PlanAnswer{Protocol: linkproto.ProtocolVersion, Node: "n", Revision: 2}
	for i := range 40 {
		a.Steps = append(a.Steps, linkproto.PlanStep{ID: fmt.Sprintf("file:/etc/%02d.conf", i), Action: event.ActionUpdate, Diff: cut})
	}
	a.Fit()
	if n := len(linkproto.Marshal(a)); n > linkproto.MaxPlanAnswerSize {
		t.Fatalf("after Fit the answer is %d bytes; the limit is %d", n, linkproto.MaxPlanAnswerSize)
	}
	if a.Omitted != 0 || len(a.Steps) != 40 {
		t.Errorf("got %d steps, %d omitted; want every step kept, diffs left out first", len(a.Steps), a.Omitted)
	}
	if a.Steps[0].Diff != cut || !strings.Contains(a.Steps[39].Diff, "diff cut: ") || strings.Contains(a.Steps[39].Diff, "+a line") {
		t.Errorf("want the first diffs kept and the last left out with a note; got first %d bytes, last %q", len(a.Steps[0].Diff), a.Steps[39].Diff)
	}
}

// TestDecodePlanRequestChecksAsAPush: a plan request for another node, or
// without a revision, is refused before any signature is looked at.
func TestDecodePlanRequestChecksAsAPush(t *testing.T) {
	p := linkproto.PlanRequest{Protocol: linkproto.ProtocolVersion, Mesh: "home", Node: "web-1", Revision: 2, Document: []byte(`{}`)}
	if _, err := linkproto.DecodePlanRequest(linkproto.Marshal(p), "home", "web-1"); err != nil {
		t.Fatalf("its own: %v", err)
	}
	if _, err := linkproto.DecodePlanRequest(linkproto.Marshal(p), "home", "web-2"); !errors.Is(err, linkproto.ErrWrongNode) {
		t.Errorf("another node's: got %v, want %v", err, linkproto.ErrWrongNode)
	}
	p.Revision = 0
	if _, err := linkproto.DecodePlanRequest(linkproto.Marshal(p), "home", "web-1"); !errors.Is(err, linkproto.ErrMalformed) {
		t.Errorf("no revision: got %v, want %v", err, linkproto.ErrMalformed)
	}
}

// A duration reads as the string it is written as (µ included), as the
// same string with escapes, or as nanoseconds; anything else is refused.
func TestDurationForms(t *testing.T) {
	for in, want := range map[string]time.Duration{
		`"1m0s"`:         time.Minute,
		`"1.5µs"`:        1500 * time.Nanosecond,
		`"-2h0m0s"`:      -2 * time.Hour,
		`"1\u006d0s"`:    time.Minute, // an escaped "m"
		`60000000000`:    time.Minute,
		`"1h\u00b5s"`:    0, // refused: no such unit
		`"1m`:            0, // refused: not JSON
		`true`:           0, // refused
		`"1m0s" `:        time.Minute,
		`"\"1m0s\""`:     0, // refused: quotes inside
		`"9999999999h"`:  0, // refused: out of range
		`-1000000000000`: -1000 * time.Second,
	} {
		var d linkproto.Duration
		err := json.Unmarshal([]byte(in), &d)
		switch {
		case want == 0 && err == nil:
			t.Errorf("%s read as %v, want refused", in, time.Duration(d))
		case want != 0 && (err != nil || time.Duration(d) != want):
			t.Errorf("%s = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, d := range []time.Duration{0, time.Nanosecond, 1500 * time.Nanosecond, time.Minute, -90 * time.Second, 1<<63 - 1} {
		b, err := json.Marshal(linkproto.Duration(d))
		var s string
		if err != nil || json.Unmarshal(b, &s) != nil || s != d.String() {
			t.Errorf("%v wrote %s, %v", d, b, err)
		}
		var back linkproto.Duration
		if err := json.Unmarshal(b, &back); err != nil || time.Duration(back) != d {
			t.Errorf("%v came back as %v, %v", d, time.Duration(back), err)
		}
	}
}

// TestTokenIssuedAt: a token says when it was made; one made before the
// field existed is dated by its bootstrap JWT, to the second; one with
// neither is dated the zero time, which every refusal covers.
func TestTokenIssuedAt(t *testing.T) {
	made := time.Date(2026, 12, 4, 12, 0, 0, 500, time.UTC)
	if got := (linkproto.Token{Issued: made}).IssuedAt(); !got.Equal(made) {
		t.Errorf("with Issued: got %v, want %v", got, made)
	}
	acc, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	before := time.Now().Truncate(time.Second)
	boot, err := jwt.NewUserClaims(pub).Encode(acc)
	if err != nil {
		t.Fatal(err)
	}
	if got := (linkproto.Token{Bootstrap: boot}).IssuedAt(); got.Before(before) || got.After(time.Now()) {
		t.Errorf("from the bootstrap JWT: got %v, want about now (%v)", got, before)
	}
	if got := (linkproto.Token{Bootstrap: "not a jwt"}).IssuedAt(); !got.IsZero() {
		t.Errorf("with neither: got %v, want the zero time", got)
	}
}
