package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

// encodeLines writes exactly what one encoder writing the values in turn
// would, across runs, and stops writing at a value that does not encode.
func TestEncodeLinesIsOneEncoderInOrder(t *testing.T) {
	type row struct {
		N    int    `json:"n"`
		Name string `json:"name"`
	}
	for _, n := range []int{0, 1, linesAtOnce - 1, linesAtOnce, linesAtOnce + 1, 10*linesAtOnce + 7} {
		rows := make([]row, n)
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		for i := range rows {
			rows[i] = row{i, fmt.Sprintf("node-%05d <&>", i)}
			if err := enc.Encode(rows[i]); err != nil {
				t.Fatal(err)
			}
		}
		var got bytes.Buffer
		if err := encodeLines(&got, rows); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("%d rows: the lines differ from one encoder's", n)
		}
	}

	values := make([]float64, 3*linesAtOnce)
	values[2*linesAtOnce+5] = math.NaN() // json cannot encode it
	var got bytes.Buffer
	err := encodeLines(&got, values)
	var unsupported *json.UnsupportedValueError
	if !errors.As(err, &unsupported) {
		t.Fatalf("a NaN encoded, or another error: %v", err)
	}
	if lines := bytes.Count(got.Bytes(), []byte("\n")); lines != 2*linesAtOnce {
		t.Fatalf("%d lines written before the run that failed, want %d", lines, 2*linesAtOnce)
	}
}
