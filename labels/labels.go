// Package labels is a node's labels and the selectors that choose nodes by
// them: `role=web,dc in (fra,ams),!canary`. One grammar for every command
// that takes --select. It knows nothing of NATS or of nodes' other state.
package labels

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Limits on labels: a key is a DNS label, a value is short, a node has few.
const (
	MaxKeyBytes   = 63
	MaxValueBytes = 63
	MaxPerNode    = 64
)

// ErrInvalid is returned for a label or selector that does not read.
var ErrInvalid = errors.New("invalid label")

var (
	keyRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	valueRE = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
)

// CheckKey refuses a key that is not a DNS label of at most MaxKeyBytes.
func CheckKey(k string) error {
	if len(k) > MaxKeyBytes || !keyRE.MatchString(k) {
		return fmt.Errorf("%w: key %q: want a DNS label (a-z, 0-9 and -, at most %d bytes, starting and ending with a letter or digit)", ErrInvalid, k, MaxKeyBytes)
	}
	return nil
}

// checkValue refuses a value that is longer than MaxValueBytes or holds
// other than letters, digits, -, _ and . (inside).
func checkValue(k, v string) error {
	if len(v) > MaxValueBytes || !valueRE.MatchString(v) {
		return fmt.Errorf("%w: value %q of %s: want at most %d bytes of letters, digits, and - _ . inside", ErrInvalid, v, k, MaxValueBytes)
	}
	return nil
}

// Set is a node's labels.
type Set map[string]string

// Check refuses a set with an invalid label or too many.
func (s Set) Check() error {
	if len(s) > MaxPerNode {
		return fmt.Errorf("%w: %d labels, over %d", ErrInvalid, len(s), MaxPerNode)
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if err := CheckKey(k); err != nil {
			return err
		}
		if err := checkValue(k, s[k]); err != nil {
			return err
		}
	}
	return nil
}

// String is the set as key=value pairs, sorted, separated by commas.
func (s Set) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		parts = append(parts, k+"="+s[k])
	}
	return strings.Join(parts, ",")
}

// CheckEdits refuses an edit that Apply would refuse whatever the set:
// what can be checked before the set is read.
func CheckEdits(edits []string) error {
	_, err := Set{}.apply(edits)
	return err
}

// Apply returns s changed by edits, each "key=value" (set) or "key-"
// (remove), as `meshctl label` takes them; s is left as it was.
func (s Set) Apply(edits []string) (Set, error) {
	out, err := s.apply(edits)
	if err != nil {
		return nil, err
	}
	return out, out.Check()
}

// apply is Apply without the check of the whole set.
func (s Set) apply(edits []string) (Set, error) {
	out := maps.Clone(s)
	if out == nil {
		out = Set{}
	}
	for _, e := range edits {
		if k, ok := strings.CutSuffix(e, "-"); ok && !strings.Contains(e, "=") {
			if err := CheckKey(k); err != nil {
				return nil, err
			}
			delete(out, k)
			continue
		}
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("%w: %q: want key=value to set a label, or key- to remove it", ErrInvalid, e)
		}
		if err := CheckKey(k); err != nil {
			return nil, err
		}
		if err := checkValue(k, v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}
