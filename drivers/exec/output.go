package exec

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mesh-host/mesh-host/drivers"
)

// What of a run's output is kept: its head and its tail, where a command
// says what it set out to do and why it stopped, and a count of what was
// left out between them. A command may print without end; the host keeps
// 64 KiB of it whatever it prints.
const (
	headBytes = 32 << 10
	tailBytes = 32 << 10
	// margin is kept beyond each cut and redacted with it before the cut
	// is made, so that a secret the cut falls across is still whole
	// when Redact looks for it (a key or certificate up to margin long).
	margin = 8 << 10
	// noteBytes bounds the output an ApplyNote or a Refreshed.Note
	// carries; errorBytes the output an error carries (its tail, where
	// the reason a command failed usually is).
	noteBytes  = 2 << 10
	errorBytes = 4 << 10
)

// capture keeps the head and tail of what a process writes, and counts
// the rest. It is written by one goroutine and read once that is done.
type capture struct {
	head  []byte // the first headBytes+margin bytes
	tail  []byte // a ring of the last tailBytes+margin bytes after head
	next  int    // where the ring writes next, once it is full
	total int64  // every byte written, kept or not
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := headBytes + margin - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	const ring = tailBytes + margin
	for len(p) > 0 {
		if len(c.tail) < ring {
			k := min(ring-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(c.tail[c.next:], p)
		c.next = (c.next + k) % ring
		p = p[k:]
	}
	return n, nil
}

// skip drops the first n bytes, which must be in the head: what
// systemd-run said before the command started is not the command's.
func (c *capture) skip(n int) {
	c.head = c.head[n:]
	c.total -= int64(n)
}

// ordered returns the tail in the order it was written.
func (c *capture) ordered() []byte {
	if c.next == 0 {
		return c.tail
	}
	return append(append([]byte(nil), c.tail[c.next:]...), c.tail[:c.next]...)
}

// render is what was captured as a person may read it (drivers.Shown:
// secrets redacted, nothing a terminal would act on), and at most
// headBytes+tailBytes of it, the head and the tail with what was left out
// between them counted.
func (c *capture) render(redact func(string) string) string {
	rest := c.ordered()
	if c.total <= headBytes+tailBytes {
		return drivers.Shown(string(c.head)+string(rest), redact)
	}
	if int64(len(c.head)+len(c.tail)) == c.total && len(c.head) > headBytes {
		// Nothing was lost between head and ring: the tail is cut from
		// all that follows the head's cut, the head's margin included.
		rest = append(c.head[headBytes:len(c.head):len(c.head)], rest...)
	}
	// Cut after redacting, so that no cut leaves a secret's tail behind
	// the pattern that would have found it.
	head := drivers.Shown(string(c.head), redact)
	head = head[:cutFront(head, headBytes)]
	tail := drivers.Shown(string(rest), redact)
	tail = tail[cutBack(tail, tailBytes):]
	left := c.total - headBytes - tailBytes
	return head + fmt.Sprintf("\n… %d bytes left out …\n", left) + tail
}

// cutFront is where to cut s to keep at most n bytes of its front
// without splitting a character.
func cutFront(s string, n int) int {
	if len(s) <= n {
		return len(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// cutBack is where to cut s to keep at most n bytes of its back without
// splitting a character.
func cutBack(s string, n int) int {
	if len(s) <= n {
		return 0
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// lastOf is the last n bytes of s or so, cut at a line where one is near,
// marked as cut: what a note or an error carries of an output.
func lastOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[cutBack(s, n):]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < n/4 {
		s = s[i+1:]
	}
	return "…" + s
}
