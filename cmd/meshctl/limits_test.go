package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/declaration/declarationtest"
)

// `meshctl declare` refuses a file over a limit, naming it, before it
// reaches for the broker: nothing can be stored. A file far over the
// limit is read no further than the limit.
func TestDeclareRefusesOverTheLimits(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if code, _, stderr := meshctl(t, "--data", data, "init"); code != command.ExitOK {
		t.Fatalf("init: exit %d: %s", code, stderr)
	}
	huge := filepath.Join(dir, "huge.yaml")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	files := map[string]string{huge: fmt.Sprintf("over the limit for a declaration: %d bytes (it was read no further than %d)", declaration.MaxBytes, declaration.MaxBytes+1)}
	for i, c := range declarationtest.OverLimits("home", "web-1", 1) {
		for _, ext := range []string{".json", ".yaml"} {
			name := filepath.Join(dir, string(rune('a'+i))+ext)
			if err := os.WriteFile(name, c.Document, 0o644); err != nil {
				t.Fatal(err)
			}
			files[name] = c.Limit
		}
	}
	for name, limit := range files {
		// Without --nats: a declaration that passed would fail for want
		// of a broker (exit 1), not be refused.
		code, stdout, stderr := meshctl(t, "--data", data, "declare", "web-1", name)
		if code != command.ExitRefused || stdout != "" || !strings.Contains(stderr, limit) {
			t.Errorf("%s: exit %d: %.300s", filepath.Base(name), code, stderr)
		}
	}
}
