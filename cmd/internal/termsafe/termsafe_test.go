package termsafe

import (
	"bytes"
	"testing"
)

func TestWriter(t *testing.T) {
	for in, want := range map[string]string{
		"plain line\n\tindented\n":       "plain line\n\tindented\n",
		"file:/etc/\x1b]0;owned\x07motd": `file:/etc/\x1b]0;owned\x07motd`,
		"ok\rFAKE":                       `ok\x0dFAKE`,
		"csi \u009b31m red":              `csi \u009b31m red`,
		"über ünïcode stays":             "über ünïcode stays",
		"del\x7f":                        `del\x7f`,
	} {
		var b bytes.Buffer
		n, err := Writer(&b).Write([]byte(in))
		if err != nil || n != len(in) || b.String() != want {
			t.Errorf("Write(%q) = %d, %v, wrote %q; want %q", in, n, err, b.String(), want)
		}
	}
}
