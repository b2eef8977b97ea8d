package projector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
)

// The comparisons below name each field, so that Diff can say which one
// differs in the State's own JSON path; fields_test.go changes every leaf of
// State in turn and fails if a comparison here (or Clone) misses it.

// Equal reports whether a and b say the same thing: Diff(a, b) is empty. A
// nil and an empty map or slice are equal, and times are equal when they are
// the same instant.
func Equal(a, b State) bool {
	d := differ{quick: true}
	d.state(a, b)
	return !d.found
}

// Diff returns one line for each field in which a and b differ, naming it by
// its JSON path, as in
//
//	head: 12 != 13
//	owned["file:/etc/motd"].spec_digest: "sha256:aa" != "sha256:bb"
//	owned["file:/etc/issue"]: absent != {"spec_digest":"sha256:cc","last_outcome":"created","seq":9}
//
// with a's value on the left. It returns nil when they are Equal.
func Diff(a, b State) []string {
	var d differ
	d.state(a, b)
	return d.lines
}

// differ walks two States in field order. Equal runs it quick, finding out
// whether anything differs without formatting what.
type differ struct {
	quick bool
	found bool
	lines []string
}

func (d *differ) add(path string, a, b string) {
	d.found = true
	if !d.quick {
		d.lines = append(d.lines, path+": "+a+" != "+b)
	}
}

func (d *differ) state(a, b State) {
	same(d, "head", a.Head, b.Head)
	d.desired(a.Desired, b.Desired)
	d.owned(a.Owned, b.Owned)
	d.reconcile(a.LastReconcile, b.LastReconcile)
	d.running(a.Running, b.Running)
	same(d, "known_good", a.KnownGood, b.KnownGood)
	if !slices.Equal(a.Versions, b.Versions) {
		d.add("versions", show(a.Versions), show(b.Versions))
	}
	same(d, "link.up", a.Link.Up, b.Link.Up)
	same(d, "link.broker", a.Link.Broker, b.Link.Broker)
	sameTime(d, "link.since", a.Link.Since, b.Link.Since)
	same(d, "link.reason", a.Link.Reason, b.Link.Reason)
	same(d, "unknown", a.Unknown, b.Unknown)
	same(d, "undecodable", a.Undecodable, b.Undecodable)
	d.pending(a.Pending, b.Pending)
	d.lastGood(a.LastGood, b.LastGood)
	d.failing(a.Failing, b.Failing)
	d.skipped(a.Skipped, b.Skipped)
	eachDiffering(d, "ids", a.IDs, b.IDs, func(p string, x, y string) { d.add(p, show(x), show(y)) })
	eachDiffering(d, "made", a.Made, b.Made, func(p string, x, y string) { d.add(p, show(x), show(y)) })
	d.refreshes(a.Refreshes, b.Refreshes)
	if (a.Facts == nil) != (b.Facts == nil) || a.Facts != nil && !reflect.DeepEqual(*a.Facts, *b.Facts) {
		d.add("facts", show(a.Facts), show(b.Facts))
	}
	if !slices.Equal(a.Bad, b.Bad) {
		d.add("bad", show(a.Bad), show(b.Bad))
	}
	d.local(a.Local, b.Local)
}

func (d *differ) local(a, b *LocalOverride) {
	const p = "local"
	if !bothOrNeither(d, p, a, b) {
		return
	}
	same(d, p+".revision", a.Revision, b.Revision)
	same(d, p+".source", a.Source, b.Source)
	same(d, p+".user", a.User, b.User)
	same(d, p+".seq", a.Seq, b.Seq)
	sameTime(d, p+".at", a.At, b.At)
	same(d, p+".mesh_revision", a.MeshRevision, b.MeshRevision)
	same(d, p+".mesh_signature", a.MeshSignature, b.MeshSignature)
}

func (d *differ) failing(a, b map[string]Failure) {
	eachDiffering(d, "failing", a, b, func(p string, x, y Failure) { d.add(p, show(x), show(y)) })
}

func (d *differ) skipped(a, b map[string]Skip) {
	eachDiffering(d, "skipped", a, b, func(p string, x, y Skip) { d.add(p, show(x), show(y)) })
}

func (d *differ) refreshes(a, b map[string]OwedRefresh) {
	eachDifferingFunc(d, "refreshes", a, b, sameRefresh, func(p string, x, y OwedRefresh) { d.add(p, show(x), show(y)) })
}

// sameRefresh: every field, the time as an instant.
func sameRefresh(x, y OwedRefresh) bool {
	return slices.Equal(x.Sources, y.Sources) && x.More == y.More && x.Refresh == y.Refresh && x.Since.Equal(y.Since) &&
		x.Seq == y.Seq && x.Error == y.Error && x.FailedSeq == y.FailedSeq
}

// eachDiffering calls fields for each id in both a and b whose values
// differ, in id order, and notes an id in one only; quick stops at the
// first difference. fields names what differs under the path it is given.
func eachDiffering[V comparable](d *differ, name string, a, b map[string]V, fields func(path string, x, y V)) {
	eachDifferingFunc(d, name, a, b, func(x, y V) bool { return x == y }, fields)
}

// eachDifferingFunc is eachDiffering for values that eq compares.
func eachDifferingFunc[V any](d *differ, name string, a, b map[string]V, eq func(x, y V) bool, fields func(path string, x, y V)) {
	if d.quick {
		if len(a) != len(b) {
			d.found = true
			return
		}
		for id, x := range a {
			if y, ok := b[id]; !ok || !eq(x, y) {
				d.found = true
				return
			}
		}
		return
	}
	ids := make([]string, 0, len(a)+len(b))
	for id := range a {
		ids = append(ids, id)
	}
	for id := range b {
		if _, ok := a[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		x, inA := a[id]
		y, inB := b[id]
		if inA && inB && eq(x, y) {
			continue
		}
		p := name + "[" + strconv.Quote(id) + "]"
		switch {
		case !inA:
			d.add(p, "absent", show(y))
		case !inB:
			d.add(p, show(x), "absent")
		default:
			fields(p, x, y)
		}
	}
}

func (d *differ) lastGood(a, b *LastGood) {
	const p = "last_good"
	if !bothOrNeither(d, p, a, b) {
		return
	}
	same(d, p+".revision", a.Revision, b.Revision)
	same(d, p+".digest", a.Digest, b.Digest)
	same(d, p+".seq", a.Seq, b.Seq)
	same(d, p+".converged", a.Converged, b.Converged)
	sameTime(d, p+".at", a.At, b.At)
}

func (d *differ) desired(a, b *Desired) {
	const p = "desired"
	if !bothOrNeither(d, p, a, b) {
		return
	}
	same(d, p+".revision", a.Revision, b.Revision)
	same(d, p+".digest", a.Digest, b.Digest)
	sameElems(d, p+".resources", a.Resources, b.Resources)
	same(d, p+".seq", a.Seq, b.Seq)
	same(d, p+".source", a.Source, b.Source)
	same(d, p+".operator", a.Operator, b.Operator)
	same(d, p+".signer", a.Signer, b.Signer)
	same(d, p+".signature", a.Signature, b.Signature)
	same(d, p+".reclaim", a.Reclaim, b.Reclaim)
	same(d, p+".document_sha256", a.DocumentSHA256, b.DocumentSHA256)
	same(d, p+".document_bytes", a.DocumentBytes, b.DocumentBytes)
	if !bytes.Equal(a.Document, b.Document) {
		at := 0
		for at < len(a.Document) && at < len(b.Document) && a.Document[at] == b.Document[at] {
			at++
		}
		d.add(p+".document", fmt.Sprintf("%d bytes", len(a.Document)),
			fmt.Sprintf("%d bytes (first difference at byte %d)", len(b.Document), at))
	}
}

func (d *differ) owned(a, b map[string]Owned) {
	eachDiffering(d, "owned", a, b, func(p string, x, y Owned) {
		same(d, p+".spec_digest", x.SpecDigest, y.SpecDigest)
		same(d, p+".good_revision", x.GoodRevision, y.GoodRevision)
		same(d, p+".last_outcome", x.LastOutcome, y.LastOutcome)
		same(d, p+".seq", x.Seq, y.Seq)
		same(d, p+".drifted", x.Drifted, y.Drifted)
		same(d, p+".error", x.Error, y.Error)
	})
}

func (d *differ) reconcile(a, b *Reconcile) {
	const p = "last_reconcile"
	if !bothOrNeither(d, p, a, b) {
		return
	}
	same(d, p+".seq", a.Seq, b.Seq)
	same(d, p+".trigger", a.Trigger, b.Trigger)
	same(d, p+".revision", a.Revision, b.Revision)
	same(d, p+".result", a.Result, b.Result)
	sameTime(d, p+".started", a.Started, b.Started)
	sameTime(d, p+".completed", a.Completed, b.Completed)
	same(d, p+".changed", a.Changed, b.Changed)
	same(d, p+".unchanged", a.Unchanged, b.Unchanged)
	same(d, p+".failed", a.Failed, b.Failed)
	same(d, p+".quiet", a.Quiet, b.Quiet)
}

func (d *differ) running(a, b *Running) {
	const p = "running"
	if !bothOrNeither(d, p, a, b) {
		return
	}
	same(d, p+".version", a.Version, b.Version)
	same(d, p+".build", a.Build, b.Build)
	same(d, p+".pid", a.PID, b.PID)
	sameTime(d, p+".since", a.Since, b.Since)
	same(d, p+".seq", a.Seq, b.Seq)
}

func (d *differ) pending(a, b *Pending) {
	const p = "pending"
	if !bothOrNeither(d, p, a, b) {
		return
	}
	same(d, p+".seq", a.Seq, b.Seq)
	same(d, p+".trigger", a.Trigger, b.Trigger)
	same(d, p+".revision", a.Revision, b.Revision)
	sameElems(d, p+".plan", a.Plan, b.Plan)
}

// bothOrNeither reports whether a and b are both set, so their fields are
// to be compared, after noting it if only one is.
func bothOrNeither[T any](d *differ, path string, a, b *T) bool {
	switch {
	case a == nil && b == nil:
		return false
	case a == nil:
		d.add(path, "nil", show(b))
		return false
	case b == nil:
		d.add(path, show(a), "nil")
		return false
	}
	return true
}

func same[T comparable](d *differ, path string, a, b T) {
	if a != b {
		d.add(path, show(a), show(b))
	}
}

func sameTime(d *differ, path string, a, b time.Time) {
	if !a.Equal(b) {
		d.add(path, show(a), show(b))
	}
}

// sameElems compares two lists of small structs element by element; an
// element one list lacks shows as absent.
func sameElems[E comparable](d *differ, path string, a, b []E) {
	for i := range max(len(a), len(b)) {
		switch {
		case i >= len(a):
			d.add(path+"["+strconv.Itoa(i)+"]", "absent", show(b[i]))
		case i >= len(b):
			d.add(path+"["+strconv.Itoa(i)+"]", show(a[i]), "absent")
		case a[i] != b[i]:
			d.add(path+"["+strconv.Itoa(i)+"]", show(a[i]), show(b[i]))
		}
	}
}

// show formats one value of a State for Diff: scalars as Go literals, times
// in RFC 3339, and everything else as its JSON.
func show(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case event.Action:
		return strconv.Quote(string(v))
	case event.Trigger:
		return strconv.Quote(string(v))
	case event.Result:
		return strconv.Quote(string(v))
	case time.Time:
		if v.IsZero() {
			return "zero time"
		}
		return v.UTC().Format(time.RFC3339Nano)
	case bool, int, uint64:
		return fmt.Sprint(v)
	case []string:
		if v == nil {
			return "[]"
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}
