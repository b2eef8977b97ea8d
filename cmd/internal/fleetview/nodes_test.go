package fleetview

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/labels"
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

// TestNodeColumns: --columns chooses and orders the columns, each with the
// value its one function gives; labels are k=v pairs sorted by key, never
// a pair cut, the pairs past the cell's width counted; an unknown column
// is refused naming those there are.
func TestNodeColumns(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	nodes := []client.NodeStatus{
		{Node: "web-1", State: "failed", Reason: strings.Repeat("a reason that is long and is not cut; ", 4) + "declare the directory /srv",
			Labels: labels.Set{"role": "web", "dc": "fra", "tier": "a-rather-long-tier-name", "zone": "z1"}},
		{Node: "web-2", State: "ok"},
	}
	cols, err := ParseNodeColumns("state,labels,node")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := PrintNodeTable(&out, nodes, now, cols); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !regexp.MustCompile(`^STATE +LABELS +NODE$`).MatchString(lines[0]) {
		t.Errorf("heading %q, want STATE LABELS NODE", lines[0])
	}
	if !strings.Contains(lines[1], "declare the directory /srv ") || !strings.Contains(lines[1], " dc=fra,role=web,+2 more ") || !strings.HasSuffix(lines[1], " web-1") {
		t.Errorf("row %q, want the whole reason, the labels that fit and a count of the rest", lines[1])
	}
	if !regexp.MustCompile(`^ok +- +web-2$`).MatchString(lines[2]) {
		t.Errorf("row %q, want a node with no labels shown as -", lines[2])
	}
	if _, err := ParseNodeColumns("node,bogus"); err == nil || !strings.Contains(err.Error(), `"bogus"`) || !strings.Contains(err.Error(), strings.Join(NodeColumns(), ", ")) {
		t.Errorf("an unknown column: got %v, want it refused naming the columns", err)
	}
}

// TestNodeCellIsTheTablesCell: the web view's cells are the table's, in
// its words.
func TestNodeCellIsTheTablesCell(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	n := client.NodeStatus{Node: "web-1", State: client.StateFailed, Reason: "1 failed", Desired: 3, Labels: labels.Set{"role": "web"},
		Heartbeat: &linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Node: "web-1", Applied: 3, Failed: 1, Drifted: 2, Sent: now.Add(-90 * time.Second), Build: "next", Version: "next"}}
	for name, want := range map[string]string{
		"node": "web-1", "desired": "3", "applied": "3", "failed": "1", "drifted": "2", "last-heard": "1m30s ago",
		"version": "next", "labels": "role=web", "state": "failed: 1 failed", "no-such-column": "",
	} {
		if got := NodeCell(name, n, now); got != want {
			t.Errorf("NodeCell(%q) = %q, want %q", name, got, want)
		}
	}
}
