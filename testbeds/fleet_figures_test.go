package testbeds_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

// The fleet figures of issue 12, over a real meshctl serve. Run them with
//
//	go test ./testbeds -run '^$' -bench Fleet -benchtime 1x
//
// (each measures one fleet; b.N is ignored).

// BenchmarkEnrolBatch: `meshctl enrol --batch` for 5,000 nodes, with and
// without a label a line (labels are stored through the running control
// service): the nodes enrolled a second.
func BenchmarkEnrolBatch(b *testing.B) {
	const nodes = 5000
	for _, labelled := range []bool{false, true} {
		b.Run(fmt.Sprintf("labels=%v", labelled), func(b *testing.B) {
			bed := testbeds.New(b, bins)
			file := filepath.Join(b.TempDir(), "batch.txt")
			var lines strings.Builder
			for i := range nodes {
				fmt.Fprintf(&lines, "node-%05d", i)
				if labelled {
					fmt.Fprintf(&lines, " role=fleet rack=r%d", i%40)
				}
				lines.WriteByte('\n')
			}
			if err := os.WriteFile(file, []byte(lines.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			out := bed.MustMeshctl("enrol", "--batch", file)
			took := time.Since(start)
			b.StopTimer()
			if got := strings.Count(out, "\n"); got != nodes {
				b.Fatalf("enrol --batch printed %d lines, want %d", got, nodes)
			}
			b.ReportMetric(took.Seconds(), "s/batch")
			b.ReportMetric(nodes/took.Seconds(), "nodes/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
