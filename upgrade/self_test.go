package upgrade_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/upgrade"
)

// selfHelperEnv makes the test binary a helper process: it resolves itself,
// says "ready PATH", then answers each line on stdin with Replaced().
const selfHelperEnv = "UPGRADE_TEST_SELF_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(selfHelperEnv) == "1" {
		os.Exit(selfHelper())
	}
	os.Exit(m.Run())
}

func selfHelper() int {
	s, err := upgrade.Resolve()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready", s.Path)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		replaced, why, err := s.Replaced()
		fmt.Printf("%v %v %s\n", replaced, err, why)
	}
	return 0
}

// helper is a running copy of the test binary, asked whether it was
// replaced.
type helper struct {
	t    *testing.T
	exe  string
	in   io.WriteCloser
	out  *bufio.Reader
	cmd  *exec.Cmd
	path string // what it resolved itself to
}

func startHelper(t *testing.T, invokeAs string) *helper {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "mesh-host")
	copyExe(t, os.Args[0], exe)
	if invokeAs == "" {
		invokeAs = exe
	} else if err := os.Symlink(exe, invokeAs); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(invokeAs)
	cmd.Env = append(os.Environ(), selfHelperEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, exe: exe, in: in, out: bufio.NewReader(outPipe), cmd: cmd}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	line := h.line()
	p, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		t.Fatalf("helper said %q", line)
	}
	h.path = p
	return h
}

func (h *helper) line() string {
	h.t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() { s, err := h.out.ReadString('\n'); ch <- res{s, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			h.t.Fatalf("helper: %v", r.err)
		}
		return strings.TrimSpace(r.s)
	case <-time.After(20 * time.Second):
		h.t.Fatal("helper did not answer")
	}
	return ""
}

// ask returns whether the helper says it was replaced, and why.
func (h *helper) ask() (bool, string) {
	h.t.Helper()
	fmt.Fprintln(h.in, "?")
	l := h.line()
	replaced, rest, _ := strings.Cut(l, " ")
	errText, why, _ := strings.Cut(rest, " ")
	if errText != "<nil>" {
		h.t.Fatalf("helper: Replaced failed: %s", l)
	}
	return replaced == "true", why
}

func copyExe(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestReplaced: a real process, asked about its own executable. An
// unchanged file is never "replaced", however often it is asked; a file
// renamed over it, a deletion, and a changed modification time are.
func TestReplaced(t *testing.T) {
	t.Run("unchanged", func(t *testing.T) {
		h := startHelper(t, "")
		if h.path != h.exe {
			t.Errorf("resolved itself to %s, want %s", h.path, h.exe)
		}
		for range 50 {
			if replaced, why := h.ask(); replaced {
				t.Fatalf("unchanged executable reported replaced: %s", why)
			}
		}
	})
	t.Run("renamed-over", func(t *testing.T) {
		h := startHelper(t, "")
		next := h.exe + ".new"
		copyExe(t, os.Args[0], next)
		if err := os.Rename(next, h.exe); err != nil {
			t.Fatal(err)
		}
		if replaced, why := h.ask(); !replaced {
			t.Fatal("a file renamed over the executable: not reported replaced")
		} else {
			t.Logf("why: %s", why)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		h := startHelper(t, "")
		if err := os.Remove(h.exe); err != nil {
			t.Fatal(err)
		}
		if replaced, why := h.ask(); !replaced || !strings.Contains(why, "deleted") {
			t.Fatalf("deleted executable: replaced %v, why %q", replaced, why)
		}
	})
	t.Run("touched", func(t *testing.T) {
		h := startHelper(t, "")
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(h.exe, later, later); err != nil {
			t.Fatal(err)
		}
		if replaced, why := h.ask(); !replaced || !strings.Contains(why, "written over") {
			t.Fatalf("executable modified in place: replaced %v, why %q", replaced, why)
		}
	})
	t.Run("through-a-symlink", func(t *testing.T) {
		h := startHelper(t, filepath.Join(t.TempDir(), "link"))
		if h.path != h.exe {
			t.Errorf("resolved itself to %s, want the link's target %s", h.path, h.exe)
		}
		if replaced, why := h.ask(); replaced {
			t.Fatalf("started through a link, reported replaced: %s", why)
		}
	})
}
