package exec

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
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

// render is what was captured as a person may read it: secrets redacted,
// no control character that a terminal would act on, and at most
// headBytes+tailBytes of it, the head and the tail with what was left out
// between them counted.
func (c *capture) render(redact func(string) string) string {
	rest := c.ordered()
	if c.total <= headBytes+tailBytes {
		return safe(redact(string(c.head) + string(rest)))
	}
	if int64(len(c.head)+len(c.tail)) == c.total && len(c.head) > headBytes {
		// Nothing was lost between head and ring: the tail is cut from
		// all that follows the head's cut, the head's margin included.
		rest = append(c.head[headBytes:len(c.head):len(c.head)], rest...)
	}
	head := redact(string(c.head))
	head = head[:cutFront(head, headBytes)]
	tail := redact(string(rest))
	tail = tail[cutBack(tail, tailBytes):]
	left := c.total - headBytes - tailBytes
	return safe(head) + fmt.Sprintf("\n… %d bytes left out …\n", left) + safe(tail)
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

// safe escapes what a terminal would act on rather than show: C0 control
// characters but newline and tab (an escape sequence, a carriage return
// that hides what came before it on the line), DEL, C1 controls, the
// invisible characters that reorder or hide text (bidirectional
// overrides, zero-width ones), and bytes that are not UTF-8. Each is
// shown as a Go escape, \x1b or \u202e, so that it can be seen for what
// it is.
func safe(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f, invisible(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// invisible reports the format characters that change how the text
// around them is shown (Trojan Source, CVE-2021-42574) or are not shown
// at all.
func invisible(r rune) bool {
	return r >= 0x200b && r <= 0x200f || // zero-width space, joiners, LRM, RLM
		r >= 0x202a && r <= 0x202e || // embeddings and overrides
		r >= 0x2060 && r <= 0x2069 || // word joiner, invisible operators, isolates
		r == 0xfeff // zero-width no-break space
}

// credentials are the obvious forms of a credential in what a command
// prints, whose values are redacted whatever the host knows: a
// key=value or key: value whose key names a password, token, secret or
// key; the password of a URL; a bearer token.
var credentials = []struct {
	re   *regexp.Regexp
	with string
}{
	{
		regexp.MustCompile(`(?i)([A-Za-z0-9_.-]*(?:password|passwd|passphrase|token|secret|api[_-]?key|access[_-]?key)[A-Za-z0-9_.-]*"?\s*[=:]\s*)("[^"\n]*"|'[^'\n]*'|[^\s"',;&]+)`),
		"${1}[redacted]",
	},
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@`), "${1}[redacted]@"},
	{regexp.MustCompile(`(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+`), "${1}[redacted]"},
}

// redactor returns the redaction applied to everything the driver shows
// of a command and its output: the host's own (the secret values it
// knows), then the obvious credentials.
func redactor(host func(string) string) func(string) string {
	return func(s string) string {
		if host != nil {
			s = host(s)
		}
		for _, c := range credentials {
			s = c.re.ReplaceAllString(s, c.with)
		}
		return s
	}
}
