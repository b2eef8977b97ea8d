package drivers

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// What a tool, a command or a service printed reaches the host's journal,
// the control plane's streams and an operator's terminal. Shown is the one
// way the drivers make it fit for all three.

// Shown is s as the host shows what a tool, a command or a service
// printed: the secrets redact knows (nil: none) and obvious credentials
// replaced, and made Printable. It redacts before and after Printable: a
// secret holding a control character is found before it is escaped, and
// one split by an escape sequence is whole once the sequence is removed.
func Shown(s string, redact func(string) string) string {
	if redact != nil {
		s = redact(s)
	}
	s = Printable(s)
	if redact != nil {
		s = redact(s)
	}
	return redactCredentials(s)
}

// escapeSequence is an ANSI escape sequence: CSI (ESC [ … final byte),
// OSC (ESC ] … BEL or ST) and the two-byte escapes.
var escapeSequence = regexp.MustCompile("\x1b\\[[0-?]*[ -/]*[@-~]|\x1b\\][^\x07\x1b]*(\x07|\x1b\\\\)?|\x1b[@-Z\\\\-_]")

// Printable returns s with what a terminal would act on rather than show
// made harmless. ANSI escape sequences are removed: they are presentation
// (colour, a title), and what they leave is the text. Every other control
// character but newline and tab (C0 and DEL as \x0d, C1 as \u009b), the
// invisible characters that reorder or hide text (bidirectional overrides
// and isolates, zero-width ones: Trojan Source, CVE-2021-42574), and bytes
// that are not UTF-8 (\xff) are written as a Go escape, so that each can
// be seen for what it is.
func Printable(s string) string {
	s = escapeSequence.ReplaceAllString(s, "")
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
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
// around them is shown or are not shown at all.
func invisible(r rune) bool {
	return r >= 0x200b && r <= 0x200f || // zero-width space, joiners, LRM, RLM
		r >= 0x202a && r <= 0x202e || // embeddings and overrides
		r >= 0x2060 && r <= 0x2069 || // word joiner, invisible operators, isolates
		r == 0xfeff // zero-width no-break space
}

// credentials are the obvious forms of a credential in what a tool
// prints, in the order they are redacted: an Authorization header's value
// (its scheme too: Basic carries the password itself), a key=value or
// key: value whose key names a password, token, secret or key, the
// password of a URL, and a bearer token anywhere else.
var credentials = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)(authorization["']?\s*[:=]\s*)[^\n]+`), "${1}[redacted]"},
	{
		regexp.MustCompile(`(?i)([A-Za-z0-9_.-]*(?:password|passwd|passphrase|token|secret|api[_-]?key|access[_-]?key)[A-Za-z0-9_.-]*["']?\s*[=:]\s*)("[^"\n]*"|'[^'\n]*'|[^\s"',;&]+)`),
		"${1}[redacted]",
	},
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@`), "${1}[redacted]@"},
	{regexp.MustCompile(`(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+`), "${1}[redacted]"},
}

// redactCredentials replaces with [redacted] the values of the obvious
// forms of a credential in s (see credentials), whatever the host knows.
func redactCredentials(s string) string {
	for _, c := range credentials {
		s = c.re.ReplaceAllString(s, c.with)
	}
	return s
}
