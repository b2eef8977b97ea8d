package linkproto

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What a node or the broker says is shown on a terminal and in pages: a
// text field of a message is either refused (printable) or fit
// (FitPrintable) before it is kept.

// printable refuses s over max bytes, not UTF-8, or holding a character
// that is not printable.
func printable(field, s string, max int) error {
	if len(s) > max || !utf8.ValidString(s) {
		return fmt.Errorf("%s: at most %d bytes of UTF-8 text", field, max)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%s: %q holds a character that is not printable", field, s)
		}
	}
	return nil
}

// FitPrintable is s with every character that is not printable (and every
// invalid byte) left out, cut at a character's end to at most max bytes:
// for a text that is kept whatever it holds, such as a node's reason for
// stopping or the broker's for closing a connection.
func FitPrintable(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, s)
	for len(s) > max {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
