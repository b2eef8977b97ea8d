package declaration_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-host/mesh-host/declaration"
)

func seeds(f *testing.F, patterns ...string) {
	for _, p := range patterns {
		files, err := filepath.Glob(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
}

// check holds what every parse must: an error that is Errors of placed
// problems matching ErrInvalid, or a declaration whose wire form reads back
// to the same declaration with the same digest.
func check(t *testing.T, d *declaration.Declaration, err error) {
	if err != nil {
		if d != nil {
			t.Fatalf("got a declaration beside %v", err)
		}
		var es declaration.Errors
		if !errors.As(err, &es) || !errors.Is(err, declaration.ErrInvalid) || len(es) == 0 {
			t.Fatalf("got %T %v, want Errors matching ErrInvalid", err, err)
		}
		for _, e := range es {
			if e.Line < 1 || e.Column < 1 {
				t.Fatalf("got %q, want a line and column", e)
			}
		}
		return
	}
	wire, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := declaration.ParseJSON("wire.json", wire)
	if err != nil {
		t.Fatalf("the wire form %s does not parse: %v", wire, err)
	}
	if !same(d, back) {
		t.Fatalf("got %+v after a round trip of %s, want %+v", back, wire, d)
	}
	if d.Digest() != back.Digest() {
		t.Fatalf("got digest %s after a round trip, want %s", back.Digest(), d.Digest())
	}
	d.Expanded()
	d.RefuseInstallation(testInstallation) // must not panic, whatever the declaration
}

func FuzzParseYAML(f *testing.F) {
	seeds(f, "../examples/*.yaml", "testdata/bad/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := declaration.ParseYAML("fuzz.yaml", data)
		check(t, d, err)
	})
}

func FuzzParseJSON(f *testing.F) {
	seeds(f, "../examples/*.json", "testdata/bad/*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := declaration.ParseJSON("fuzz.json", data)
		check(t, d, err)
	})
}
