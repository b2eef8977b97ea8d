package fleetview

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/linkproto"
)

// TestPrintNodesHeartbeatWithoutTime: a heartbeat that gives no time (a
// node's bug, or a forgery) shows as such, not as 292 years ago.
func TestPrintNodesHeartbeatWithoutTime(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	nodes := []client.NodeStatus{{Node: "web-1", State: client.StateSilent, Heartbeat: &linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Node: "web-1"}}}
	var out strings.Builder
	if err := PrintNodes(&out, nodes, now, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no time given") || strings.Contains(out.String(), "2562047h") {
		t.Errorf("printed:\n%s", out.String())
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
