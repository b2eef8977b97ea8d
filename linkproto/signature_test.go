package linkproto_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/linkproto"
)

func signingKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := linkproto.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// TestDeclarationSignatureCoversEveryField: changing any field a node acts
// on, or signing with another key, makes verification fail with the error
// that names it.
func TestDeclarationSignatureCoversEveryField(t *testing.T) {
	key, trusted := signingKey(t)
	other, _ := signingKey(t)
	signed := func() linkproto.Declaration {
		d := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "home", Node: "n", Revision: 3, Operator: "ops@desk",
			Document: []byte(`{"mesh":"home","node":"n","revision":3,"resources":[]}`)}
		if err := d.Sign(key); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := signed()
	if err := d.Verify(trusted); err != nil {
		t.Fatalf("a signed declaration: %v", err)
	}
	if err := linkproto.VerifyStored(trusted, d.Mesh, d.Node, d.Revision, d.Operator, d.Document, d.Signer, d.Signature); err != nil {
		t.Fatalf("VerifyStored: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(*linkproto.Declaration)
		want   error
	}{
		{"mesh", func(d *linkproto.Declaration) { d.Mesh = "work" }, linkproto.ErrBadSignature},
		{"node", func(d *linkproto.Declaration) { d.Node = "m" }, linkproto.ErrBadSignature},
		{"revision", func(d *linkproto.Declaration) { d.Revision = 4 }, linkproto.ErrBadSignature},
		{"operator", func(d *linkproto.Declaration) { d.Operator = "mallory" }, linkproto.ErrBadSignature},
		{"document", func(d *linkproto.Declaration) { d.Document = append([]byte(nil), d.Document[:len(d.Document)-1]...) }, linkproto.ErrBadSignature},
		{"operator moved into the node", func(d *linkproto.Declaration) { d.Node, d.Operator = d.Node+"ops@desk", "" }, linkproto.ErrBadSignature},
		{"no signature", func(d *linkproto.Declaration) { d.Signer, d.Signature = "", "" }, linkproto.ErrUnsigned},
		{"another key", func(d *linkproto.Declaration) { d.Sign(other) }, linkproto.ErrUntrustedSigner},
		{"another key's signature under the mesh's name", func(d *linkproto.Declaration) { d.Sign(other); d.Signer = trusted }, linkproto.ErrBadSignature},
	} {
		d := signed()
		c.change(&d)
		if err := d.Verify(trusted); !errors.Is(err, c.want) {
			t.Errorf("%s changed: Verify = %v, want %v", c.name, err, c.want)
		}
	}
}

// TestAnswersAreBoundToTheirQuestion: a welcome or synced verifies only
// for the hello or sync whose nonce it signed, for its own node, and a
// signature over one kind of message is no signature over another.
func TestAnswersAreBoundToTheirQuestion(t *testing.T) {
	key, trusted := signingKey(t)
	w := linkproto.Welcome{Protocol: linkproto.ProtocolVersion, EventsThrough: 40, Nonce: "n1"}
	if err := w.Sign(key, "home", "a"); err != nil {
		t.Fatal(err)
	}
	if err := w.Verify(trusted, "home", "a", "n1"); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	if err := w.Verify(trusted, "home", "a", "n2"); !errors.Is(err, linkproto.ErrBadSignature) {
		t.Errorf("a welcome replayed to another hello: %v", err)
	}
	if err := w.Verify(trusted, "home", "b", "n1"); !errors.Is(err, linkproto.ErrBadSignature) {
		t.Errorf("a welcome for node a verified for b: %v", err)
	}
	raised := w
	raised.EventsThrough = 1 << 40
	if err := raised.Verify(trusted, "home", "a", "n1"); !errors.Is(err, linkproto.ErrBadSignature) {
		t.Errorf("a raised events mark verified: %v", err)
	}
	s := linkproto.Synced{Protocol: linkproto.ProtocolVersion, EventsThrough: 40, Nonce: "n1", Signer: w.Signer, Signature: w.Signature}
	if err := s.Verify(trusted, "home", "a", "n1"); !errors.Is(err, linkproto.ErrBadSignature) {
		t.Errorf("a welcome's signature verified as a synced's: %v", err)
	}
	if err := s.Sign(key, "home", "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(trusted, "home", "a", "n1"); err != nil {
		t.Errorf("synced: %v", err)
	}
	if a, b := linkproto.NewNonce(), linkproto.NewNonce(); a == b || len(a) < 20 {
		t.Errorf("nonces %q and %q", a, b)
	}
}

func TestOperatorNamesAreBounded(t *testing.T) {
	for _, ok := range []string{"ops@desk", "Jörg Müller", "ci:pipeline/42"} {
		if err := linkproto.ValidOperator(ok); err != nil {
			t.Errorf("ValidOperator(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", linkproto.MaxOperatorLen+1), "a\nb", "a\x1b[31m", "\xff"} {
		if err := linkproto.ValidOperator(bad); err == nil {
			t.Errorf("ValidOperator(%q) accepted it", bad)
		}
	}
}

// A document holding <, > or & (a unit's ExecStart=sh -c 'a && b') arrives
// as it was signed: escaped on the way, it would not verify.
func TestDeclarationTravelsAsSigned(t *testing.T) {
	kp, pub := signingKey(t)
	doc := `{"mesh":"lab","node":"web-1","revision":1,"resources":[{"unit":{"name":"a.service","content":"ExecStart=/bin/sh -c 'a && b < c > d'\n"}}]}`
	d := &linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "lab", Node: "web-1", Revision: 1, Document: []byte(doc)}
	if err := d.Sign(kp); err != nil {
		t.Fatal(err)
	}
	w := &linkproto.Welcome{Protocol: linkproto.ProtocolVersion, Declaration: d}
	var got linkproto.Welcome
	if err := linkproto.Decode(linkproto.Marshal(w), linkproto.MaxDeclarationSize, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Declaration.Document) != doc {
		t.Errorf("the document arrived as\n%s\nwant\n%s", got.Declaration.Document, doc)
	}
	if err := got.Declaration.Verify(pub); err != nil {
		t.Errorf("it does not verify: %v", err)
	}
}

// TestPlanAndPushSignaturesDoNotCross: a plan request is signed for
// planning only, so neither signature verifies as the other: a broker
// cannot turn a dry run into a change, nor a push into a plan.
func TestPlanAndPushSignaturesDoNotCross(t *testing.T) {
	key, trusted := signingKey(t)
	other, _ := signingKey(t)
	d := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "home", Node: "n", Revision: 3, Operator: "ops@desk",
		Document: []byte(`{"mesh":"home","node":"n","revision":3,"resources":[]}`)}
	p := linkproto.PlanRequest(d)
	if err := d.Sign(key); err != nil {
		t.Fatal(err)
	}
	if err := p.Sign(key); err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(trusted); err != nil {
		t.Fatalf("a signed plan request: %v", err)
	}
	asPlan := linkproto.PlanRequest(d)
	if err := asPlan.Verify(trusted); !errors.Is(err, linkproto.ErrBadSignature) {
		t.Errorf("a push's signature on a plan request: got %v, want %v", err, linkproto.ErrBadSignature)
	}
	asPush := linkproto.Declaration(p)
	if err := asPush.Verify(trusted); !errors.Is(err, linkproto.ErrBadSignature) {
		t.Errorf("a plan request's signature on a push: got %v, want %v", err, linkproto.ErrBadSignature)
	}
	unsigned := linkproto.PlanRequest(d)
	unsigned.Signer, unsigned.Signature = "", ""
	if err := unsigned.Verify(trusted); !errors.Is(err, linkproto.ErrUnsigned) {
		t.Errorf("an unsigned plan request: got %v, want %v", err, linkproto.ErrUnsigned)
	}
	foreign := linkproto.PlanRequest(d)
	if err := foreign.Sign(other); err != nil {
		t.Fatal(err)
	}
	if err := foreign.Verify(trusted); !errors.Is(err, linkproto.ErrUntrustedSigner) {
		t.Errorf("a plan request signed by another key: got %v, want %v", err, linkproto.ErrUntrustedSigner)
	}
}

// A prepared key is the same key: the same public key, signatures that
// are byte-equal to the nkey's own and verify as a declaration's.
func TestPreparedKeySignsAsItsNkey(t *testing.T) {
	kp, trusted := signingKey(t)
	prepared, err := linkproto.Prepared(kp)
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := prepared.PublicKey(); pub != trusted {
		t.Fatalf("prepared public key %s, want %s", pub, trusted)
	}
	for _, input := range [][]byte{nil, []byte("x"), make([]byte, 10000)} {
		want, _ := kp.Sign(input)
		got, err := prepared.Sign(input)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("prepared signature of %d bytes differs from the nkey's (err %v)", len(input), err)
		}
	}
	d := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "home", Node: "n", Revision: 1, Document: []byte(`{}`)}
	if err := d.Sign(prepared); err != nil {
		t.Fatal(err)
	}
	if err := d.Verify(trusted); err != nil {
		t.Fatalf("a declaration signed by the prepared key does not verify: %v", err)
	}
}
