package declaration

import (
	"regexp"
	"testing"

	"pgregory.net/rapid"
)

// TestBareKeyIsTheGrammar: bareKey says what ^[A-Za-z0-9_-]+$ says, for
// any string.
func TestBareKeyIsTheGrammar(t *testing.T) {
	grammar := regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	for _, k := range []string{"", "a", "Z", "0", "_", "-", "path", "a-b_9", "a.b", "a b", "é", `"`, "a\n", "\x00"} {
		if got, want := bareKey(k), grammar.MatchString(k); got != want {
			t.Errorf("bareKey(%q) = %v, want %v", k, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.StringMatching(`[A-Za-z0-9_.\- é"]{0,6}`).Draw(t, "key")
		if got, want := bareKey(k), grammar.MatchString(k); got != want {
			t.Fatalf("bareKey(%q) = %v, want %v", k, got, want)
		}
	})
}
