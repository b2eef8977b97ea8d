package event

import "testing"

// Kinds lists exactly the kinds that have a payload: the two must be
// extended together.
func TestKindsMatchPayloads(t *testing.T) {
	seen := map[Kind]bool{}
	for _, k := range Kinds() {
		if !Known(k) {
			t.Errorf("Kinds lists %q, which has no payload", k)
		}
		if seen[k] {
			t.Errorf("Kinds lists %q twice", k)
		}
		seen[k] = true
	}
	if len(seen) != len(payloads) {
		t.Errorf("Kinds lists %d kinds; %d have a payload", len(seen), len(payloads))
	}
}
