package upgrade_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/upgrade"
)

func TestKnownGood(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if kg, err := upgrade.ReadKnownGood(state); kg != "" || err != nil {
		t.Fatalf("no record: got %q, %v", kg, err)
	}
	for _, v := range []string{"aaaa", "bbbb"} {
		if err := upgrade.WriteKnownGood(state, v); err != nil {
			t.Fatal(err)
		}
		if kg, err := upgrade.ReadKnownGood(state); kg != v || err != nil {
			t.Fatalf("got %q, %v; want %s", kg, err, v)
		}
		// sh reads it as the launcher does.
		out, err := exec.Command("sh", "-c", `read -r v rest < "$1" && printf %s "$v"`, "sh", filepath.Join(state, upgrade.KnownGoodFile)).Output()
		if err != nil || string(out) != v {
			t.Fatalf("sh read %q, %v; want %s", out, err, v)
		}
	}
	if entries, _ := os.ReadDir(state); len(entries) != 1 {
		t.Errorf("%d files in the state directory, want only the record", len(entries))
	}
	if err := upgrade.WriteKnownGood(state, "../x"); !errors.Is(err, upgrade.ErrNotVersion) {
		t.Errorf("a bad name: got %v", err)
	}
	writeFile(t, filepath.Join(state, upgrade.KnownGoodFile), "two words\n")
	if _, err := upgrade.ReadKnownGood(state); !errors.Is(err, upgrade.ErrBadRecord) {
		t.Errorf("a bad record: got %v", err)
	}
}

func TestLauncherFiles(t *testing.T) {
	state := t.TempDir()
	ldir := filepath.Join(state, upgrade.LauncherDir)
	if v, n, err := upgrade.Failures(state); v != "" || n != 0 || err != nil {
		t.Fatalf("no failures file: %q %d %v", v, n, err)
	}
	writeFile(t, filepath.Join(ldir, upgrade.FailuresFile), "abc 2\n")
	if v, n, err := upgrade.Failures(state); v != "abc" || n != 2 || err != nil {
		t.Fatalf("failures: %q %d %v", v, n, err)
	}
	if err := upgrade.ClearFailures(state); err != nil {
		t.Fatal(err)
	}
	if err := upgrade.ClearFailures(state); err != nil {
		t.Fatalf("clearing twice: %v", err)
	}
	writeFile(t, filepath.Join(ldir, upgrade.BadFile), "bcd 139\n")
	if v, code, err := upgrade.Bad(state); v != "bcd" || code != 139 || err != nil {
		t.Fatalf("bad: %q %d %v", v, code, err)
	}

	writeFile(t, filepath.Join(ldir, upgrade.DecisionFile),
		"rolled-back bcd abc 1 bcd failed 3 starts in a row, the last with exit code 1\n"+
			"garbage\n"+
			"rolled-back x y 2\n")
	ds, err := upgrade.Decisions(state)
	if !errors.Is(err, upgrade.ErrBadRecord) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("got %v, want ErrBadRecord naming line 2", err)
	}
	want := []upgrade.Decision{
		{Verb: upgrade.VerbRolledBack, From: "bcd", To: "abc", ExitCode: 1, Reason: "bcd failed 3 starts in a row, the last with exit code 1"},
		{Verb: upgrade.VerbRolledBack, From: "x", To: "y", ExitCode: 2},
	}
	if len(ds) != len(want) || ds[0] != want[0] || ds[1] != want[1] {
		t.Errorf("got %+v, want %+v", ds, want)
	}
	if err := upgrade.RemoveDecisions(state); err != nil {
		t.Fatal(err)
	}
	if ds, err := upgrade.Decisions(state); ds != nil || err != nil {
		t.Errorf("after removal: %v %v", ds, err)
	}
	if err := upgrade.RemoveDecisions(state); err != nil {
		t.Errorf("removing twice: %v", err)
	}
}
