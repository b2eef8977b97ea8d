package client

import (
	"errors"
	"slices"
	"strconv"
	"testing"
)

// decodeAside hands use every value read, decoded, each once, and returns
// read's error only after use has had everything read before it.
func TestDecodeAsideUsesEveryValueOnce(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 257, 5000} {
		stop := errors.New("the link went down")
		for _, readErr := range []error{nil, stop} {
			var used []int
			err := decodeAside(func(put func(string)) error {
				for i := range n {
					put(strconv.Itoa(i))
				}
				return readErr
			}, func(s string) int {
				i, err := strconv.Atoi(s)
				if err != nil {
					t.Error(err)
				}
				return i
			}, func(i int) { used = append(used, i) })
			if !errors.Is(err, readErr) || (readErr == nil && err != nil) {
				t.Fatalf("%d values, read's error %v: got %v", n, readErr, err)
			}
			slices.Sort(used)
			if len(used) != n {
				t.Fatalf("%d values read, %d used", n, len(used))
			}
			for i, v := range used {
				if v != i {
					t.Fatalf("%d values read: value %d used as %d (twice, or another lost)", n, i, v)
				}
			}
		}
	}
}
