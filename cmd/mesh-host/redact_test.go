package main

import "testing"

// TestRedactor: every secret value opened, and each long line of a
// multi-line one, is replaced; a value too short to tell apart is not.
func TestRedactor(t *testing.T) {
	var r redactor
	r.add([]byte("hunter2hunter2"))
	r.add([]byte("-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END KEY-----\n"))
	r.add([]byte("ab"))
	for in, want := range map[string]string{
		"login with hunter2hunter2 failed":     "login with [secret] failed",
		"line: MIIEvQIBADANBgkqhkiG9w0B here":  "line: [secret] here",
		"ab is too short to be told apart":     "ab is too short to be told apart",
		"nothing secret":                       "nothing secret",
		"hunter2hunter2hunter2hunter2 doubled": "[secret][secret] doubled",
	} {
		if got := r.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
