package linkproto_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// owning is a state that owns n files.
func owning(n int) projector.State {
	s := projector.State{Head: uint64(n) + 3, Desired: &projector.Desired{Revision: 1}, Owned: make(map[string]projector.Owned, n)}
	for i := range n {
		s.Owned[fmt.Sprintf("file:/etc/app/f%06d.conf", i)] = projector.Owned{
			SpecDigest: fmt.Sprintf("sha256:%064x", i*7919), GoodRevision: 1, LastOutcome: event.ActionCreate, Seq: uint64(i) + 2}
	}
	return s
}

// TestLargeReportsAreSentCompressed: a small report goes as JSON; a large
// one compressed, and read back as it was.
func TestLargeReportsAreSentCompressed(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	small := linkproto.ReportOf("home", "web-1", owning(3), at)
	if small.Encoding != "" || !bytes.Equal(small.Body, linkproto.Marshal(small.Report)) {
		t.Errorf("a small report was encoded %q", small.Encoding)
	}

	large := linkproto.ReportOf("home", "web-1", owning(19000), at)
	doc := linkproto.Marshal(large.Report)
	if large.Encoding != linkproto.EncodingGzip || len(large.Body) > len(doc)/4 {
		t.Fatalf("a report of %d bytes was sent as %d bytes, encoding %q; want gzip and a quarter at most", len(doc), len(large.Body), large.Encoding)
	}
	t.Logf("19,000 owned files: %d bytes of JSON sent as %d", len(doc), len(large.Body))
	var back linkproto.Report
	if err := linkproto.DecodeReport(large.Body, large.Encoding, &back); err != nil {
		t.Fatal(err)
	}
	if !projector.Equal(back.State, large.State) || linkproto.ReportDigest(back) != large.Digest {
		t.Errorf("the report read back differs: %v", projector.Diff(back.State, large.State))
	}
}

// TestReportsTooLargeAsJSONKeepTheirOwnedResources: a report whose JSON
// is over a message's limit but fits compressed keeps every owned
// resource; one that fits in neither form says what it left out.
func TestReportsTooLargeAsJSONKeepTheirOwnedResources(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	r := linkproto.ReportOf("home", "web-1", owning(60000), at)
	if n := len(linkproto.Marshal(r.Report)); n <= linkproto.MaxDeclarationSize {
		t.Fatalf("the report's JSON is %d bytes, not over the limit of %d: the test tests nothing", n, linkproto.MaxDeclarationSize)
	}
	if r.Omitted != "" || len(r.State.Owned) != 60000 {
		t.Errorf("the report left out %q (%d owned kept)", r.Omitted, len(r.State.Owned))
	}
	if len(r.Body) > linkproto.MaxDeclarationSize {
		t.Errorf("it is sent as %d bytes, over the limit", len(r.Body))
	}

	// Errors of random text do not compress: 15 MB of JSON stays over
	// the limit gzipped.
	s := owning(3000)
	noise := make([]byte, 3750)
	for id, o := range s.Owned {
		_, _ = rand.Read(noise)
		o.LastOutcome, o.Error = event.ActionFailed, base64.StdEncoding.EncodeToString(noise)
		s.Owned[id] = o
	}
	r = linkproto.ReportOf("home", "web-1", s, at)
	if r.Omitted == "" || r.State.Owned != nil || len(r.Body) > linkproto.MaxDeclarationSize {
		t.Errorf("a report that fits in no form kept %d owned resources, sent as %d bytes, omitted %q", len(r.State.Owned), len(r.Body), r.Omitted)
	}
	var back linkproto.Report
	if err := linkproto.DecodeReport(r.Body, r.Encoding, &back); err != nil || back.Omitted != r.Omitted {
		t.Errorf("the report without its owned resources reads back as omitting %q: %v", back.Omitted, err)
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestHostileReportBodies: a body that inflates past the bound, is not
// gzip, or names an unknown encoding is refused by name.
func TestHostileReportBodies(t *testing.T) {
	bomb := gzipped(t, []byte(`{"protocol":1,"mesh":"home","node":"web-1","omitted":"`+strings.Repeat("0", linkproto.MaxReportJSON)+`"}`))
	if len(bomb) > linkproto.MaxDeclarationSize {
		t.Fatalf("the bomb is %d bytes compressed: it should be small", len(bomb))
	}
	var r linkproto.Report
	for _, c := range []struct {
		name, enc string
		body      []byte
		want      error
	}{
		{"inflates past the bound", linkproto.EncodingGzip, bomb, linkproto.ErrTooLarge},
		{"not gzip", linkproto.EncodingGzip, []byte(`{"protocol":1}`), linkproto.ErrMalformed},
		{"cut short", linkproto.EncodingGzip, gzipped(t, []byte(`{"protocol":1,"mesh":"home"}`))[:20], linkproto.ErrMalformed},
		{"unknown encoding", "br", []byte(`{"protocol":1}`), linkproto.ErrMalformed},
		{"compressed body over the limit", linkproto.EncodingGzip, make([]byte, linkproto.MaxDeclarationSize+1), linkproto.ErrTooLarge},
	} {
		if err := linkproto.DecodeReport(c.body, c.enc, &r); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}
