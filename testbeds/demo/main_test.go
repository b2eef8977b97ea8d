package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLauncherCompilesLittle keeps the launcher on the standard library
// and buildprogress: what it imports, `go run` compiles in silence before
// the launcher can say it is building.
func TestLauncherCompilesLittle(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := strings.Fields(string(out))
	want := []string{"github.com/mesh-host/mesh-host/testbeds/buildprogress", "github.com/mesh-host/mesh-host/testbeds/demo"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the launcher compiles %v; want only %v", got, want)
	}
}

// TestLauncherSaysFirstAndPassesTheExit runs the launcher as `go run`
// would: it says it is building before anything else, builds the demo, and
// hands back the demo's exit code and words.
func TestLauncherSaysFirstAndPassesTheExit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the demo; skipped with -short")
	}
	var stdout, stderr bytes.Buffer
	code := launch([]string{"--dir", t.TempDir(), "bogus"}, &stdout, &stderr)
	if !strings.HasPrefix(stdout.String(), "building the demo") {
		t.Errorf("the launcher's first words are not that it is building:\n%s", stdout.String())
	}
	if code != 1 || !strings.Contains(stderr.String(), `unknown command "bogus"`) {
		t.Errorf("demo bogus: exit %d, stderr:\n%s\nwant exit 1 and the demo's own refusal", code, stderr.String())
	}
}
