package localsock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func serve(t *testing.T, h Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return path
}

func TestCallCarriesStreamsAndExitCode(t *testing.T) {
	path := serve(t, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		fmt.Fprintf(stdout, "args: %s\n", strings.Join(args, " "))
		stdout.Write(bytes.Repeat([]byte("x"), 3*maxFrame+5)) // split into frames
		fmt.Fprintln(stderr, "a warning")
		return 3
	})
	var out, errs bytes.Buffer
	code, err := Call(context.Background(), path, []string{"journal", "--since", "7"}, &out, &errs)
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 {
		t.Errorf("got exit code %d, want 3", code)
	}
	if want := "args: journal --since 7\n"; !strings.HasPrefix(out.String(), want) || out.Len() != len(want)+3*maxFrame+5 {
		t.Errorf("got stdout of %d bytes starting %.40q, want %q and %d bytes", out.Len(), out.String(), want, 3*maxFrame+5)
	}
	if errs.String() != "a warning\n" {
		t.Errorf("got stderr %q, want %q", errs.String(), "a warning\n")
	}
}

func TestSocketIsRootOnly(t *testing.T) {
	path := serve(t, func(context.Context, []string, io.Writer, io.Writer) int { return 0 })
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: got mode %o, want %o", p, got, want)
		}
	}
}

func TestCallWithNoService(t *testing.T) {
	_, err := Call(context.Background(), filepath.Join(t.TempDir(), "none.sock"), nil, io.Discard, io.Discard)
	if !errors.Is(err, ErrNoService) {
		t.Errorf("got %v, want ErrNoService", err)
	}
}

func TestListenRefusesALiveService(t *testing.T) {
	path := serve(t, func(context.Context, []string, io.Writer, io.Writer) int { return 0 })
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another mesh-host service answers") {
		t.Errorf("got %v, want a refusal", err)
	}
}

// A client that goes away ends the command it asked for: a follower must
// not outlive its reader.
func TestClientHangupCancelsCommand(t *testing.T) {
	ended := make(chan struct{})
	path := serve(t, func(ctx context.Context, _ []string, stdout, _ io.Writer) int {
		fmt.Fprintln(stdout, "following")
		<-ctx.Done()
		close(ended)
		return 0
	})
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	go func() {
		_, _ = Call(ctx, path, []string{"journal", "--follow"}, pw, io.Discard)
		pw.Close()
	}()
	buf := make([]byte, len("following\n"))
	if _, err := io.ReadFull(pr, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the command outlived its client")
	}
}

// TestLongPath: a socket whose path is longer than a socket address holds
// (a state directory deep in a workspace) is listened on, called, refused
// to a second service, and removed when the service stops.
func TestLongPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("a-deep-workspace-directory/", 5))
	path := filepath.Join(dir, "control.sock")
	if len(path) < maxSunPath {
		t.Fatalf("the path is %d bytes: not long enough to test", len(path))
	}
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another mesh-host service answers there") {
		t.Errorf("a second Listen: %v, want refused", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, l, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			fmt.Fprint(stdout, strings.Join(args, " "))
			return 0
		})
	}()
	var out bytes.Buffer
	if code, err := Call(context.Background(), path, []string{"status"}, &out, io.Discard); err != nil || code != 0 || out.String() != "status" {
		t.Errorf("Call over a long path: %d, %v, %q", code, err, out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there after the service stopped: %v", err)
	}
	if _, err := Call(context.Background(), path, nil, io.Discard, io.Discard); !errors.Is(err, ErrNoService) {
		t.Errorf("Call after the service stopped: %v, want ErrNoService", err)
	}
}
