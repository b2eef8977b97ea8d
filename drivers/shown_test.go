package drivers_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mesh-host/mesh-host/drivers"
)

// TestPrintable: escape sequences go, what a terminal would act on is
// escaped, the rest kept.
func TestPrintable(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain text\n\tindented", "plain text\n\tindented"},
		{"\x1b[2J\x1b]0;title\x07cleared", "cleared"},
		{"\x1b[1;31mred\x1b[0m and \x1b]0;title\x07done", "red and done"},
		{"lone \x1b( escape", `lone \x1b( escape`},
		{"over\rwrite, bell\a", `over\x0dwrite, bell\x07`},
		{"del\x7f nul\x00", `del\x7f nul\x00`},
		{"c1 \u009b raw \x9b", `c1 \u009b raw \x9b`},
		{"bidi \u202eevil\u202c zw\u200b bom\ufeff isolate\u2066", `bidi \u202eevil\u202c zw\u200b bom\ufeff isolate\u2066`},
		{"not utf-8 \xff\xfe", `not utf-8 \xff\xfe`},
		{"héllo ✓ 日本", "héllo ✓ 日本"},
	} {
		got := drivers.Printable(tt.in)
		if got != tt.want {
			t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Printable(%q) is not UTF-8", tt.in)
		}
		for _, r := range got {
			if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f {
				t.Errorf("Printable(%q) holds control character %U", tt.in, r)
			}
		}
	}
}

// TestShown: the host's secrets and obvious credentials are redacted,
// before and after the escaping.
func TestShown(t *testing.T) {
	host := func(s string) string { return strings.ReplaceAll(s, "hunter2", "[secret]") }
	for _, tt := range []struct{ in, want string }{
		{"password=abc", "password=[redacted]"},
		{"DB_PASSWORD='a b c' next", "DB_PASSWORD=[redacted] next"},
		{`{"client_secret": "xyz", "n": 1}`, `{"client_secret": [redacted], "n": 1}`},
		{"GITHUB_TOKEN=ghp_123;", "GITHUB_TOKEN=[redacted];"},
		{"token: abc123, next", "token: [redacted], next"},
		{"api-key: k1 api_key=k2 apikey=k3 API_KEY=k4 PASSWD='x y'", "api-key: [redacted] api_key=[redacted] apikey=[redacted] API_KEY=[redacted] PASSWD=[redacted]"},
		{"git clone https://bob:pw@example.com/r.git", "git clone https://bob:[redacted]@example.com/r.git"},
		{"> Authorization: Bearer eyJ.abc-_\nnext line", "> Authorization: [redacted]\nnext line"},
		{"authorization: Basic Ym9iOnB3", "authorization: [redacted]"},
		{"curl -H 'x: y' --oauth2-bearer zzz.yyy", "curl -H 'x: y' --oauth2-bearer [redacted]"},
		{"sent Bearer abc.def", "sent Bearer [redacted]"},
		{"the hunter2 value", "the [secret] value"},
		{"a secret split hunt\x1b[0mer2", "a secret split [secret]"},
		{"nothing secret here: 42", "nothing secret here: 42"},
	} {
		if got := drivers.Shown(tt.in, host); got != tt.want {
			t.Errorf("Shown(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := drivers.Shown("password=x \x1b[31m", nil); got != "password=[redacted] " {
		t.Errorf("Shown without a host's redaction = %q", got)
	}
}
