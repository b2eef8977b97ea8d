package linkproto

import (
	"bytes"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
)

// A Report is sent as its JSON, compressed with gzip when that is over
// compressReportsOver bytes; EncodingHeader then says so. A host of many
// thousand files reports megabytes of JSON: nats.go keeps its write
// buffer at the size of the largest message the connection sent, so the
// host would hold that much for good, and past some 28,000 files the JSON
// would not fit in one message at all. Compressed, it is about a tenth.
const (
	// EncodingHeader is the message header that names a body's encoding.
	EncodingHeader = "Mesh-Encoding"
	// EncodingGzip is a body compressed with gzip.
	EncodingGzip = "gzip"
	// compressReportsOver is the size of a Report's JSON past which it is
	// sent compressed.
	compressReportsOver = 64 << 10
	// MaxReportJSON bounds a Report's JSON once decompressed: a body that
	// inflates past it is refused, not read further.
	MaxReportJSON = 64 << 20
)

// encodeBody is the body of a Report of JSON doc as sent, and its
// encoding ("" for plain JSON).
func encodeBody(doc []byte) (body []byte, encoding string) {
	if len(doc) <= compressReportsOver {
		return doc, ""
	}
	var buf bytes.Buffer
	buf.Grow(len(doc) / 8)
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed) // a valid level: no error
	_, _ = zw.Write(doc)                               // a bytes.Buffer takes every write
	_ = zw.Close()
	if buf.Len() >= len(doc) {
		return doc, ""
	}
	return buf.Bytes(), EncodingGzip
}

// DecodeReport reads a Report's body in its encoding (the value of its
// EncodingHeader). The body is bounded by MaxDeclarationSize, as the
// broker bounds it, and its JSON by MaxReportJSON.
func DecodeReport(body []byte, encoding string, into *Report) error {
	switch encoding {
	case "":
		return Decode(body, MaxDeclarationSize, into)
	case EncodingGzip:
	default:
		return fmt.Errorf("%w: unknown encoding %q", ErrMalformed, encoding)
	}
	if len(body) > MaxDeclarationSize {
		return fmt.Errorf("%w: %d bytes compressed, the limit is %d", ErrTooLarge, len(body), MaxDeclarationSize)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %s body: %v", ErrMalformed, encoding, err)
	}
	doc, err := io.ReadAll(io.LimitReader(zr, MaxReportJSON+1))
	if err != nil {
		return fmt.Errorf("%w: %s body: %v", ErrMalformed, encoding, err)
	}
	if len(doc) > MaxReportJSON {
		return fmt.Errorf("%w: the report inflates past %d bytes", ErrTooLarge, MaxReportJSON)
	}
	return Decode(doc, MaxReportJSON, into)
}
