package event_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func sampleRecords() []event.Record {
	t0 := time.Date(2025, 3, 1, 12, 30, 45, 123456789, time.UTC)
	return []event.Record{
		{Seq: 1, Time: t0, Kind: event.HostStarted, Payload: json.RawMessage(`{"version":"v1","pid":42}`)},
		{Seq: 2, Time: t0, Kind: event.LinkUp},
		{Seq: 300, Time: t0.Add(time.Hour), Kind: event.ResourceApplied, Cause: 299, Resource: "file:/etc/x", Payload: json.RawMessage(`{"action":"created"}`)},
		{Seq: math.MaxUint64, Time: t0, Kind: "future.kind", Cause: math.MaxUint64 - 1, Resource: "ünïcödé:/☃", Payload: json.RawMessage(`[1,"two",{"3":null}]`)},
		{Seq: 1 << 40, Time: time.Unix(0, -1).UTC(), Kind: event.DriftObserved, Cause: 1 << 20, Resource: strings.Repeat("r", 40)},
	}
}

func encodeWithKey(r event.Record) (key, b []byte) { return event.Key(r.Seq), event.Encode(r) }

func TestCodecRoundTrip(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 30, 45, 123456789, time.UTC)
	tests := []struct {
		name string
		in   event.Record
		want event.Record // what Decode returns; in, when zero
	}{
		{"minimal", event.Record{Seq: 1, Time: t0, Kind: event.LinkUp}, event.Record{}},
		{"all fields", event.Record{Seq: 7, Time: t0, Kind: event.ResourceApplied, Cause: 6, Resource: "file:/etc/x", Payload: json.RawMessage(`{"action":"updated"}`)}, event.Record{}},
		{"unknown kind", event.Record{Seq: 8, Time: t0, Kind: "future.kind", Payload: json.RawMessage(`{"x":[1]}`)}, event.Record{}},
		{"largest seq and cause", event.Record{Seq: math.MaxUint64, Time: t0, Kind: event.LinkDown, Cause: math.MaxUint64 - 1}, event.Record{}},
		{"seq zero", event.Record{Seq: 0, Time: t0, Kind: event.LinkDown}, event.Record{}},
		{"unicode names", event.Record{Seq: 9, Time: t0, Kind: "kïnd.☃", Resource: "file:/ü/日本"}, event.Record{}},
		{"longest names", event.Record{Seq: 10, Time: t0, Kind: event.Kind(strings.Repeat("k", 4096)), Resource: strings.Repeat("r", 4096)}, event.Record{}},
		{"time before 1970", event.Record{Seq: 11, Time: time.Date(1900, 1, 1, 0, 0, 0, 1, time.UTC), Kind: event.LinkUp}, event.Record{}},
		{"time in another zone comes back UTC",
			event.Record{Seq: 12, Time: t0.In(time.FixedZone("X", 3600)), Kind: event.LinkUp},
			event.Record{Seq: 12, Time: t0, Kind: event.LinkUp}},
		{"time with a monotonic reading comes back without",
			event.Record{Seq: 13, Time: time.Now(), Kind: event.LinkUp},
			event.Record{}},
		{"empty payload comes back nil",
			event.Record{Seq: 14, Time: t0, Kind: event.LinkUp, Payload: json.RawMessage{}},
			event.Record{Seq: 14, Time: t0, Kind: event.LinkUp}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want.Kind == "" {
				want = tt.in
			}
			b := event.Encode(tt.in)
			got, err := event.Decode(event.Key(tt.in.Seq), b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got.Seq != want.Seq || !got.Time.Equal(want.Time) || got.Time.Location() != time.UTC ||
				got.Kind != want.Kind || got.Cause != want.Cause || got.Resource != want.Resource ||
				!bytes.Equal(got.Payload, want.Payload) || (got.Payload == nil) != (want.Payload == nil || len(want.Payload) == 0) {
				t.Errorf("got %+v, want %+v", got, want)
			}
			if again := event.Encode(got); !bytes.Equal(again, b) {
				t.Errorf("re-encoded: got %x, want %x", again, b)
			}
			// The record does not alias the bytes it came from.
			clear(b)
			if got.Payload != nil && !bytes.Equal(got.Payload, want.Payload) {
				t.Errorf("payload changed with the input: got %q", got.Payload)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	r := event.Record{Seq: 5, Time: time.Unix(1e9, 0), Kind: event.ResourceApplied, Cause: 3, Resource: "file:/a", Payload: json.RawMessage(`{}`)}
	good := event.Encode(r)
	// withCRC rewrites the checksum so the damage is caught by what follows it.
	withCRC := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[1:5], crc32.Checksum(b[5:], castagnoli))
		return b
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		key  []byte
		b    []byte
	}{
		{"short key", []byte{0, 5}, good},
		{"long key", append(event.Key(5), 0), good},
		{"empty", event.Key(5), nil},
		{"shorter than header", event.Key(5), good[:20]},
		{"unknown format", event.Key(5), edit(func(b []byte) []byte { b[0] = 2; return b })},
		{"bad checksum", event.Key(5), edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })},
		{"truncated", event.Key(5), good[:len(good)-3]},
		{"seq disagrees with key", event.Key(6), good},
		{"header only", event.Key(5), withCRC(bytes.Clone(good[:21]))},
		{"cause varint runs off the end", event.Key(5), withCRC(append(bytes.Clone(good[:21]), 0x80))},
		{"kind longer than the rest", event.Key(5), withCRC(append(bytes.Clone(good[:21]), 0, 10, 'a'))},
		{"kind over 4096", event.Key(5), withCRC(binary.AppendUvarint(append(bytes.Clone(good[:21]), 0), 4097))},
		{"kind not UTF-8", event.Key(5), withCRC(append(bytes.Clone(good[:21]), 0, 1, 0xff, 0))},
		{"resource missing", event.Key(5), withCRC(append(bytes.Clone(good[:21]), 0, 1, 'k'))},
		{"resource not UTF-8", event.Key(5), withCRC(append(bytes.Clone(good[:21]), 0, 1, 'k', 2, 0xc3, 0x28))},
		{"cause not minimally encoded", event.Key(5), withCRC(append(bytes.Clone(good[:21]), 0x83, 0x00, 1, 'k', 0))},
		{"kind length not minimally encoded", event.Key(5), withCRC(append(bytes.Clone(good[:21]), 3, 0x81, 0x00, 'k', 0))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := event.Decode(tt.key, tt.b)
			if !errors.Is(err, event.ErrCorrupt) {
				t.Errorf("got %+v, %v, want ErrCorrupt", got, err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, r := range sampleRecords() {
		_, b := encodeWithKey(r)
		f.Add(b)
		for _, n := range []int{0, 1, 5, 13, 20, 21, 22, len(b) / 2, len(b) - 1} {
			if n < len(b) {
				f.Add(bytes.Clone(b[:n]))
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check(t, b)
		// Most mutations break the checksum, which would stop Decode at
		// its first check; also try the input with a checksum that fits, so
		// the fuzzer reaches the field parsing.
		if len(b) >= 5 {
			fixed := bytes.Clone(b)
			binary.BigEndian.PutUint32(fixed[1:5], crc32.Checksum(fixed[5:], castagnoli))
			check(t, fixed)
		}
	})
}

// check decodes b under the key its own sequence names, and under a key
// that differs, and holds whatever Decode accepts to re-encoding exactly.
func check(t *testing.T, b []byte) {
	t.Helper()
	key := make([]byte, 8)
	if len(b) >= 13 {
		copy(key, b[5:13])
	}
	r, err := event.Decode(key, b)
	if err != nil {
		if !errors.Is(err, event.ErrCorrupt) {
			t.Fatalf("got error %v, want ErrCorrupt", err)
		}
		return
	}
	if got := event.Key(r.Seq); !bytes.Equal(got, key) {
		t.Fatalf("accepted seq %d under key %x", r.Seq, key)
	}
	if again := event.Encode(r); !bytes.Equal(again, b) {
		t.Fatalf("accepted %x, which re-encodes as %x (record %+v)", b, again, r)
	}
	payload := bytes.Clone(r.Payload)
	in := bytes.Clone(b)
	for i := range b {
		b[i] ^= 0xff
	}
	if !bytes.Equal(r.Payload, payload) {
		t.Fatalf("payload aliases the input")
	}
	copy(b, in)

	other := bytes.Clone(key)
	other[7] ^= 1
	if _, err := event.Decode(other, b); !errors.Is(err, event.ErrCorrupt) {
		t.Fatalf("accepted a record under key %x though it says %x", other, key)
	}
}
