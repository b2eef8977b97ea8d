package store

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mesh-host/mesh-host/linkproto"
)

// A read of the envelope only reads what a full read reads, in both stored
// forms (the envelope, and the document alone as stored before it), and
// refuses another node's entry and an oversized one.
func TestListedDeclarationReadsBothForms(t *testing.T) {
	doc := []byte(`{"mesh":"home","node":"a","revision":3,"resources":[]}`)
	envelope := linkproto.Marshal(linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "home", Node: "a", Revision: 3, Document: doc, Operator: "ops"})
	for name, value := range map[string][]byte{"envelope": envelope, "document alone": doc} {
		want, err := decodeDesired(value, "home", "a", Full)
		if err != nil {
			t.Fatalf("%s: storedDeclaration: %v", name, err)
		}
		got, err := decodeDesired(value, "home", "a", EnvelopeOnly)
		if err != nil {
			t.Fatalf("%s: listedDeclaration: %v", name, err)
		}
		if got.Revision != want.Revision || !bytes.Equal(got.Document, want.Document) || got.Operator != want.Operator {
			t.Errorf("%s: listed revision %d, document %s, operator %q; stored %d, %s, %q", name, got.Revision, got.Document, got.Operator, want.Revision, want.Document, want.Operator)
		}
		if _, err := decodeDesired(value, "home", "b", EnvelopeOnly); !errors.Is(err, linkproto.ErrWrongNode) {
			t.Errorf("%s: read as node b's: %v; want ErrWrongNode", name, err)
		}
	}
	huge := append([]byte(`{"pad":"`), bytes.Repeat([]byte("x"), linkproto.MaxDeclarationSize)...)
	if _, err := decodeDesired(append(huge, `"}`...), "home", "a", EnvelopeOnly); !errors.Is(err, linkproto.ErrTooLarge) {
		t.Errorf("an oversized entry: %v; want ErrTooLarge", err)
	}
}
