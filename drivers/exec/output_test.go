package exec

import (
	"fmt"
	"strings"
	"testing"
)

// pattern is n bytes of numbered lines, every cut of which is told apart.
func pattern(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%07d\n", i)
	}
	return b.String()[:n]
}

func captured(data string) *capture {
	var c capture
	for p := data; p != ""; {
		k := min(len(p), 4093) // writes that fall across every boundary
		c.Write([]byte(p[:k]))
		p = p[k:]
	}
	return &c
}

func same(s string) string { return s }

// TestCaptureBounds: up to 64 KiB the output is kept whole; past it, its
// first and last 32 KiB with the count of what was left out between.
func TestCaptureBounds(t *testing.T) {
	const kib = 1024
	for _, n := range []int{0, 100, 64 * kib, 64*kib + 1, 70 * kib, 80*kib + 5, 200 * kib} {
		data := pattern(n)
		want := data
		if n > 64*kib {
			want = data[:32*kib] + fmt.Sprintf("\n… %d bytes left out …\n", n-64*kib) + data[n-32*kib:]
		}
		if got := captured(data).render(same); got != want {
			t.Errorf("%d bytes written: rendered %d bytes, want %d (head %q, tail %q)", n, len(got), len(want), got[:min(len(got), 40)], got[max(0, len(got)-40):])
		}
	}
}

// TestCaptureRedactsAcrossCut: a secret the head's or the tail's cut
// falls across is redacted whole before the cut is made.
func TestCaptureRedactsAcrossCut(t *testing.T) {
	const secret = "S3CRET-VALUE-THAT-IS-LONG"
	data := pattern(200 << 10)
	for _, at := range []int{headBytes - 10, len(data) - tailBytes - 10} {
		d := data[:at] + secret + data[at+len(secret):]
		got := captured(d).render(func(s string) string { return strings.ReplaceAll(s, secret, "[secret]") })
		if strings.Contains(got, secret[:6]) || strings.Contains(got, secret[len(secret)-6:]) {
			t.Errorf("a secret at %d, across a cut, shows in part", at)
		}
	}
}

// TestCaptureSkip: what systemd-run says before the command starts is
// dropped, and counts for nothing.
func TestCaptureSkip(t *testing.T) {
	sc := &scope{unit: "mesh-exec-x-0123456789ab.scope"}
	c := captured("Running scope as unit: mesh-exec-x-0123456789ab.scope\nhello\n")
	if !sc.started(c) {
		t.Fatal("started: false, want true: the unit is named")
	}
	if got := c.render(same); got != "hello\n" {
		t.Errorf("output after the marker: %q, want %q", got, "hello\n")
	}
	for _, out := range []string{"", "Failed to start transient scope unit: Access denied\n", "hello mesh-exec-x-0123456789ab.scope"} {
		if sc.started(captured(out)) {
			t.Errorf("started with output %q: true, want false", out)
		}
	}
	if (*scope)(nil).started(captured("anything")) != true {
		t.Error("a run without a scope did not start")
	}
}

// TestLastOf: a note's or an error's share of an output is its tail,
// from a line's start where one is near, marked as cut.
func TestLastOf(t *testing.T) {
	if got := lastOf("short", 10); got != "short" {
		t.Errorf("lastOf(short) = %q", got)
	}
	if got := lastOf("aaaa\nbbbbbbbbbbbbbbb\ncccccccccccccccccccccccccccccc", 40); got != "…cccccccccccccccccccccccccccccc" {
		t.Errorf("lastOf at a line = %q", got)
	}
	if got := lastOf(strings.Repeat("é", 10), 5); got != "…éé" {
		t.Errorf("lastOf cut in a character = %q, want whole characters", got)
	}
}
