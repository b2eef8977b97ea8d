package declaration_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/declaration"
)

// TestBad parses each declaration under testdata/bad (YAML, or JSON for
// *.json) and wants exactly the messages in the .err file beside it.
// go test ./declaration -update rewrites the .err files: read the diff.
func TestBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		ext := filepath.Ext(f)
		if ext != ".yaml" && ext != ".json" {
			continue
		}
		n++
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ext), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			parse := declaration.ParseYAML
			if ext == ".json" {
				parse = declaration.ParseJSON
			}
			d, err := parse(name, data)
			if err == nil {
				t.Fatalf("got %+v, want an error", d)
			}
			if d != nil {
				t.Errorf("got a declaration %+v beside the error, want nil", d)
			}
			if !errors.Is(err, declaration.ErrInvalid) {
				t.Errorf("got %v, want it to match ErrInvalid", err)
			}
			var es declaration.Errors
			if !errors.As(err, &es) {
				t.Errorf("got %T, want Errors", err)
			}
			for _, e := range es {
				if e.File != name || e.Line < 1 || e.Column < 1 {
					t.Errorf("got %q, want a file:line:column for every problem", e)
				}
			}
			golden := strings.TrimSuffix(f, ext) + ".err"
			got := err.Error() + "\n"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./declaration -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
	if n < 15 {
		t.Errorf("got %d bad declarations, want at least 15", n)
	}
}
