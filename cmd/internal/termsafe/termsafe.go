// Package termsafe keeps what others wrote from driving the operator's
// terminal: a node's resource ids, errors, hostnames and versions, a
// declaration's strings, all reach the commands' output, and an escape
// sequence among them could rewrite the screen, hide a line or set the
// window title. Both CLIs write through it.
package termsafe

import (
	"bytes"
	"fmt"
	"io"
)

// Writer writes to w with every control character but newline and tab
// shown as an escape (\x1b), C1 controls included (\u009b).
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (f writer) Write(p []byte) (int, error) {
	if !unsafe(p) {
		return f.w.Write(p)
	}
	var b bytes.Buffer
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\n' || c == '\t':
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, p[i+1])
			i++
		default:
			b.WriteByte(c)
		}
	}
	if _, err := f.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// unsafe reports whether p holds a byte Write must escape.
func unsafe(p []byte) bool {
	for i, c := range p {
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f || c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f {
			return true
		}
	}
	return false
}
