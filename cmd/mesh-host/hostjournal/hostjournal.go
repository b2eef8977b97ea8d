// Package hostjournal is the host's journal as its commands and its
// service open it: opened with the stored projection folded in every
// append, read whole by the scrub and `journal --verify` (each command
// reads only what it needs, checked as read), its stored state loaded,
// damage recognised and made the journal's, declarations and refusals
// journaled, and the stored projection compared with a replay.
//
// It is not the journal (package journal stores records, whatever they
// mean) and not the command line: package main decides what a person is
// told and with which exit code.
package hostjournal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// LockWait is how long a command waits for the journal's lock when no
// service answers: long enough to outlast a short `apply`, short enough that
// a person is told promptly that something else holds it.
const LockWait = 3 * time.Second

// Open opens the journal for writing, with the projection folded in
// every append, waiting up to LockWait for another process to let go.
func Open(path string) (*journal.Journal, error) {
	return OpenAppended(path, nil)
}

// OpenAppended is Open, telling appended of every append committed, with
// the records as stored (journal.Options.Appended): the service's metrics
// count what it does as it journals it.
func OpenAppended(path string, appended func([]event.Record)) (*journal.Journal, error) {
	return journal.Open(path, journal.Options{
		Fold: storedFold, Timeout: LockWait,
		Documents: recordDocuments, Optional: planDocuments, StoredDocuments: storedDocuments, Expand: expand,
		Appended: appended,
	})
}

// OpenReadOnly opens the journal to read it, beside other readers.
func OpenReadOnly(path string) (*journal.Journal, error) {
	return journal.Open(path, journal.Options{ReadOnly: true, Timeout: LockWait, Documents: recordDocuments, Expand: expand})
}

// nullResources is the resources of a declaration.received as stored when
// they are stored apart.
var nullResources = []byte(`"resources":null`)

// expand puts back the resources of a declaration.received, and the plan
// of a reconcile.started, that store them apart, as their readers (the
// fold, replay, the link, the CLI) expect them: the bytes stored apart are
// the JSON of the list, spliced in where the record holds null (the
// resources) or nothing (the plan, which is omitted when empty).
func expand(r event.Record, document func(journal.Sum) ([]byte, error)) (event.Record, error) {
	if r.Kind == event.ReconcileStarted {
		return expandPlan(r, document)
	}
	if r.Kind != event.DeclarationReceived || !bytes.Contains(r.Payload, []byte(`"resources_sha256"`)) {
		return r, nil
	}
	var p struct {
		ResourcesSHA256 string `json:"resources_sha256"`
	}
	if json.Unmarshal(r.Payload, &p) != nil || p.ResourcesSHA256 == "" {
		return r, nil // the fold counts what does not decode
	}
	sum, ok := journal.ParseSum(p.ResourcesSHA256)
	if !ok || bytes.Count(r.Payload, nullResources) != 1 {
		return r, fmt.Errorf("%w: a declaration.received naming its resources %q does not hold them as null", event.ErrCorrupt, p.ResourcesSHA256)
	}
	list, err := document(sum)
	if err != nil {
		return r, fmt.Errorf("the resources of declaration.received #%d: %w", r.Seq, err)
	}
	r.Payload = bytes.Replace(r.Payload, nullResources, append([]byte(`"resources":`), list...), 1)
	return r, nil
}

// expandPlan puts back the plan of a reconcile.started that stores it
// apart (agent.MaxInlinePlan): the record as stored has no "plan" key, so
// the list goes in first.
func expandPlan(r event.Record, document func(journal.Sum) ([]byte, error)) (event.Record, error) {
	if !bytes.Contains(r.Payload, []byte(`"plan_sha256"`)) {
		return r, nil
	}
	var p struct {
		Plan       json.RawMessage `json:"plan"`
		PlanSHA256 string          `json:"plan_sha256"`
	}
	if json.Unmarshal(r.Payload, &p) != nil || p.PlanSHA256 == "" {
		return r, nil // the fold counts what does not decode
	}
	sum, ok := journal.ParseSum(p.PlanSHA256)
	if !ok || p.Plan != nil || !bytes.HasPrefix(r.Payload, []byte("{")) {
		return r, fmt.Errorf("%w: a reconcile.started naming its plan %q holds one too, or is not an object", event.ErrCorrupt, p.PlanSHA256)
	}
	list, err := document(sum)
	if errors.Is(err, journal.ErrNoDocument) {
		// Dropped by an older version's compaction, which did not know
		// the record names it (planDocuments): the plan is history, not
		// state, and the record is read without it. Such journals last
		// as long as their records: this can go when no journal kept
		// records compacted by a version before ec8a33b.
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("the plan of reconcile.started #%d: %w", r.Seq, err)
	}
	payload := make([]byte, 0, len(r.Payload)+len(list)+len(`"plan":,`))
	payload = append(append(append(payload, `{"plan":`...), list...), ',')
	r.Payload = append(payload, r.Payload[1:]...)
	return r, nil
}

// planDocuments lists the plan a reconcile.started stored apart, for
// compaction to keep. It is journal.Options.Optional, not Documents: the
// version before plans were stored apart compacts without keeping it, and
// a host rolled back to it and forward again must not find its journal
// damaged for want of a plan.
func planDocuments(r event.Record) []journal.Sum {
	if r.Kind != event.ReconcileStarted || !bytes.Contains(r.Payload, []byte(`"plan_sha256"`)) {
		return nil
	}
	var p struct {
		PlanSHA256 string `json:"plan_sha256"`
	}
	if json.Unmarshal(r.Payload, &p) != nil {
		return nil
	}
	if sum, ok := journal.ParseSum(p.PlanSHA256); ok {
		return []journal.Sum{sum}
	}
	return nil
}

// recordDocuments lists the documents a declaration.received stored apart
// names (its document and its resource list), for compaction to keep and
// Check to find.
func recordDocuments(r event.Record) []journal.Sum {
	if r.Kind != event.DeclarationReceived {
		return nil
	}
	var p struct {
		DocumentSHA256  string `json:"document_sha256"`
		ResourcesSHA256 string `json:"resources_sha256"`
	}
	if json.Unmarshal(r.Payload, &p) != nil {
		return nil
	}
	var sums []journal.Sum
	for _, s := range []string{p.DocumentSHA256, p.ResourcesSHA256} {
		if sum, ok := journal.ParseSum(s); ok {
			sums = append(sums, sum)
		}
	}
	return sums
}

// storedDocuments lists the document the desired declaration of a stored
// projection or snapshot refers to. A snapshot keeps the desired
// declaration after its record is compacted away: its document stays.
func storedDocuments(v journal.View) ([]journal.Sum, error) {
	d, err := projector.LoadDesired(v)
	if err != nil || d == nil {
		return nil, err
	}
	if sum, ok := journal.ParseSum(d.DocumentSHA256); ok {
		return []journal.Sum{sum}, nil
	}
	return nil, nil
}

// Document returns a declaration's document: inline, as records journaled
// before documents were stored apart hold it, or else the one named by
// sha (a record's or a Desired's DocumentSHA256) in j's documents.
func Document(j *journal.Journal, inline []byte, sha string) ([]byte, error) {
	if len(inline) > 0 || sha == "" {
		return inline, nil
	}
	sum, ok := journal.ParseSum(sha)
	if !ok {
		return nil, fmt.Errorf("the document's digest %q is not sha256:<hex>", sha)
	}
	doc, err := j.Document(sum)
	if errors.Is(err, journal.ErrNoDocument) {
		// Stored with its record and kept while anything names it: gone,
		// it was lost.
		return nil, j.Damaged(fmt.Errorf("the document %s is missing: %w", ShortDigest(sha), err))
	}
	if err != nil {
		return nil, AsDamage(j, err)
	}
	return doc, nil
}

// StoredState loads the journal's stored projection and the head it folds
// through. Damage is returned as AsDamage does.
func StoredState(j *journal.Journal) (projector.State, uint64, error) {
	return loadState(j, j.Projection, projector.Load)
}

// StoredCore is StoredState without the owned set (projector.LoadCore):
// every owned resource is checked, none is kept. A reconcile reads them
// through StoredOwned.
func StoredCore(j *journal.Journal) (projector.State, uint64, error) {
	return loadState(j, j.Projection, projector.LoadCore)
}

// SnapshotState loads the journal's compaction snapshot and the sequence
// it folds through.
func SnapshotState(j *journal.Journal) (projector.State, uint64, error) {
	return loadState(j, j.Snapshot, projector.Load)
}

// loadState loads the State a view of j holds (the projection, or the
// compaction snapshot) with load, and the sequence it folds through.
func loadState(j *journal.Journal, view func(func(journal.View, uint64) error) error, load func(projector.Reader) (projector.State, error)) (projector.State, uint64, error) {
	var s projector.State
	var seq uint64
	err := view(func(v journal.View, at uint64) error {
		var err error
		s, err = load(v)
		seq = at
		return err
	})
	return s, seq, AsDamage(j, err)
}

// StoredOwned is the owned set of j's stored projection, read from the
// journal each time it is walked rather than held (agent.OwnedSet). It
// is read in one read transaction, so fn must not append to j.
type StoredOwned struct{ J *journal.Journal }

// EachOwned calls fn with every owned resource, in the order of their IDs.
// Past releaseAfterOwned of them, the file's pages read meanwhile are let
// go once walked (journal.Release): fn keeps what it needs of each, and
// the pages would otherwise be a share of a large check's peak.
func (o StoredOwned) EachOwned(fn func(id string, ow projector.Owned) error) error {
	walked := 0
	err := o.J.Projection(func(v journal.View, _ uint64) error {
		return projector.EachOwned(v, func(id string, ow projector.Owned) error {
			walked++
			return fn(id, ow)
		})
	})
	if err == nil && walked > releaseAfterOwned {
		err = o.J.Release()
	}
	return AsDamage(o.J, err)
}

// releaseAfterOwned is how many owned resources a walk reads before it
// lets go of the pages it read.
const releaseAfterOwned = 2_000

// IsDamage reports whether err, anywhere in its chain, is damage found in
// the journal's file, its records or its stored projection.
func IsDamage(err error) bool {
	return errors.Is(err, journal.ErrCorrupt) || errors.Is(err, event.ErrCorrupt) || errors.Is(err, projector.ErrCorrupt)
}

// AsDamage returns err as damage to j's file when it is damage: with the
// recovery message (a projector.ErrCorrupt does not carry one), and noted
// by j so that nothing is appended to it after. Any other err is returned
// as it is.
func AsDamage(j *journal.Journal, err error) error {
	if err == nil || !IsDamage(err) {
		return err
	}
	return j.Damaged(err)
}

// projectionDamage is damage the projector found while folding, as the
// journal recognises damage from its fold (journal.Options.Fold): Append
// refuses it, and every append after it.
type projectionDamage struct{ err error }

func (d projectionDamage) Error() string        { return d.err.Error() }
func (d projectionDamage) Unwrap() error        { return d.err }
func (d projectionDamage) Is(target error) bool { return target == journal.ErrCorrupt }

// storedFold is projector.Stored's fold with its damage made the journal's.
func storedFold(st journal.Store, recs []event.Record) error {
	err := new(projector.Stored).Fold(st, recs)
	if errors.Is(err, projector.ErrCorrupt) {
		return projectionDamage{err}
	}
	return err
}

// Verify reads all of j: every record (checksums, no gaps), every
// document, the stored projection and the compaction snapshot (checksums,
// decoding). It returns the first damage found, as AsDamage does. It is
// the whole read, the scrub's and `journal --verify`'s; a command reads
// only what it needs, checked as it is read.
func Verify(j *journal.Journal) error {
	if err := j.Check(); err != nil {
		return AsDamage(j, err)
	}
	if _, _, err := StoredCore(j); err != nil {
		return err
	}
	// Read only to be checked.
	_, _, err := loadState(j, j.Snapshot, projector.LoadCore)
	return err
}

// AppendRefusal appends a declaration.refused record; d is nil when the
// declaration did not even parse.
func AppendRefusal(j *journal.Journal, source string, d *declaration.Declaration, reason error) error {
	p := event.DeclarationRefusedPayload{Source: source, Reason: reason.Error()}
	if d != nil {
		p.Revision, p.Digest = d.Revision, d.Digest()
	}
	if _, err := j.Append(event.New(event.DeclarationRefused, 0, "", p)); err != nil {
		return fmt.Errorf("journal the refusal (%v): %w", reason, err)
	}
	return nil
}

// AppendDeclaration journals an accepted declaration, document and all, so
// the host can reconcile from its journal alone while offline: the
// document in the journal's documents, the record naming it by digest. signed is
// the message it arrived in from the mesh, nil for a file: its document is
// journaled as it arrived, with the operator and the signature, so that
// the record alone proves where it came from. declared is Declared of its
// expanded specs.
//
// A declaration that is the one already desired (the same revision and
// digest and, from the mesh, the same signature) is journaled as
// declaration.reapplied instead: a small record whose cause is the
// declaration.received holding the document, so applying an unchanged
// declaration again does not store it again. It returns the seq of the
// record appended and the declaration's digest (d.Digest(), which it
// computes anyway: at 100,000 resources each marshal is tens of
// megabytes).
func AppendDeclaration(j *journal.Journal, d *declaration.Declaration, declared []event.DeclaredResource, source string, signed *linkproto.Declaration) (seq uint64, digest string, err error) {
	return AppendDeclarationAs(j, d, declared, source, signed, As{})
}

// As is what a declaration changes besides what is desired: a local
// override it begins or continues, or one a reclaim ends.
type As struct {
	// Local, User, MeshRevision and MeshSignature are the local
	// override's (see event.DeclarationReceivedPayload); User is checked
	// (linkproto.ValidLocalUser) by the caller.
	Local         bool
	User          string
	MeshRevision  uint64
	MeshSignature string
	// ReclaimedRevision is the revision of the local override a reclaim
	// ends.
	ReclaimedRevision uint64
	// Received journals it as received even when it is the one desired:
	// it begins or ends an override, which a declaration.reapplied
	// would not.
	Received bool
}

// AppendDeclarationAs is AppendDeclaration for a declaration that begins,
// continues or ends a local override.
func AppendDeclarationAs(j *journal.Journal, d *declaration.Declaration, declared []event.DeclaredResource, source string, signed *linkproto.Declaration, as As) (seq uint64, digest string, err error) {
	var cur *projector.Desired
	err = j.Projection(func(v journal.View, _ uint64) error {
		var err error
		cur, err = projector.LoadDesired(v)
		return err
	})
	if err != nil {
		return 0, "", AsDamage(j, err)
	}
	// The document as JSON, made once: a declaration's digest is its
	// digest, and at 100,000 resources each marshal is tens of megabytes.
	mine, err := d.MarshalJSON()
	if err != nil {
		return 0, "", err
	}
	digest = journal.FormatSum(journal.SumOf(mine))
	if !as.Received && same(cur, d.Revision, digest, signed) {
		recs, err := j.Append(event.New(event.DeclarationReapplied, cur.Seq, "", event.DeclarationReappliedPayload{
			Revision: d.Revision, Digest: cur.Digest, Source: source,
		}))
		if err != nil {
			return 0, "", err
		}
		return recs[0].Seq, digest, nil
	}
	p := event.DeclarationReceivedPayload{Revision: d.Revision, Digest: digest, Source: source}
	doc := mine
	if signed != nil {
		doc = signed.Document
		p.Operator, p.Signer, p.Signature = signed.Operator, signed.Signer, signed.Signature
		p.Reclaim = signed.Reclaim
	}
	p.Local, p.User, p.MeshRevision, p.MeshSignature = as.Local, as.User, as.MeshRevision, as.MeshSignature
	p.ReclaimedRevision = as.ReclaimedRevision
	// The document is stored apart, once, by digest: the record stays
	// small and a declaration that changed little adds little.
	p.DocumentSHA256, p.DocumentBytes = journal.FormatSum(journal.SumOf(doc)), len(doc)
	// So is the list of its resources (an id and a digest each: a
	// megabyte for 10,000 files), which the journal's readers see put
	// back (expand).
	list, err := json.Marshal(declared)
	if err != nil {
		return 0, "", err
	}
	p.ResourcesSHA256 = journal.FormatSum(journal.SumOf(list))
	recs, err := j.AppendDocuments([][]byte{doc, list}, event.New(event.DeclarationReceived, 0, "", p))
	if err != nil {
		return 0, "", err
	}
	return recs[0].Seq, digest, nil
}

// same reports whether the declaration of revision and digest, with
// signed its message from the mesh (nil for a file), is the one cur
// already desires: nothing about it is new
// to journal. A push must carry the same signature too, so that the
// record it refers to proves it.
func same(cur *projector.Desired, revision uint64, digest string, signed *linkproto.Declaration) bool {
	switch {
	case cur == nil || cur.Seq == 0 || cur.Revision != revision || cur.Digest != digest:
		return false
	case signed != nil:
		return signed.Signature == cur.Signature && signed.Signer == cur.Signer && signed.Operator == cur.Operator
	}
	return true
}

// Declared is the list of specs a declaration.received names: each
// resource's id and spec digest, in order.
func Declared(specs []drivers.Spec) []event.DeclaredResource {
	declared := make([]event.DeclaredResource, len(specs))
	for i, spec := range specs {
		declared[i] = event.DeclaredResource{ID: drivers.ID(spec), SpecDigest: drivers.SpecDigest(spec)}
	}
	return declared
}

// SpecDigests returns the spec digest of each of specs from declared, the
// list journaled with them, when it names the same resources in the same
// order; else nil, and the reconcile computes them.
func SpecDigests(specs []drivers.Spec, declared []event.DeclaredResource) []string {
	if len(declared) != len(specs) {
		return nil
	}
	digests := make([]string, len(specs))
	for i, r := range declared {
		if r.ID != drivers.ID(specs[i]) || r.SpecDigest == "" {
			return nil
		}
		digests[i] = r.SpecDigest
	}
	return digests
}

// Comparison is the stored projection compared with a replay.
type Comparison struct {
	Stored        projector.State
	Head, Records uint64   // the projection's head; records replayed
	Diff          []string // empty when they agree
}

// Compare replays the journal's records through the head of its
// stored projection and compares the two: what `replay --verify` prints and
// the service's scrub journals. Reading the projection first and replaying only
// through its head keeps records appended meanwhile (by a running service)
// out of the comparison.
func Compare(j *journal.Journal) (Comparison, error) {
	var c Comparison
	var err error
	if c.Stored, c.Head, err = StoredState(j); err != nil {
		return c, fmt.Errorf("stored projection of %s: %w", j.Path(), err)
	}
	replayed := projector.State{}
	if c.Head > 0 {
		if replayed, c.Records, err = Replay(j, c.Head, time.Time{}); err != nil {
			return c, fmt.Errorf("replay %s: %w", j.Path(), AsDamage(j, err))
		}
	}
	c.Diff = projector.Diff(replayed, c.Stored)
	return c, nil
}

// Scrub reads the whole journal as Verify does (every record's
// checksum, the projection's and the snapshot's) and compares the stored
// projection with a replay of the records. Damage is returned as an error
// (and noted by j, so nothing is appended after it). A disagreement
// without damage is a finding, not an error: a host rolled back across a
// change to the fold disagrees with what the newer version stored, and
// must keep running; the next declaration's records correct it.
func Scrub(j *journal.Journal) (event.JournalScrubbedPayload, []string, error) {
	var p event.JournalScrubbedPayload
	if err := Verify(j); err != nil {
		return p, nil, err
	}
	c, err := Compare(j)
	if err != nil {
		return p, nil, err
	}
	info, err := j.Info()
	if err != nil {
		return p, nil, AsDamage(j, err)
	}
	p = event.JournalScrubbedPayload{Head: c.Head, First: info.First, Records: c.Records, Owned: len(c.Stored.Owned), Differences: len(c.Diff)}
	return p, c.Diff, nil
}

// Replay folds the journal from its start (the compaction snapshot, when
// early records were compacted away) through untilSeq and untilTime (zero
// means no limit).
func Replay(j *journal.Journal, untilSeq uint64, untilTime time.Time) (projector.State, uint64, error) {
	s, snapSeq, err := SnapshotState(j)
	if err != nil {
		return projector.State{}, 0, fmt.Errorf("compaction snapshot: %w", err)
	}
	if untilSeq != 0 && untilSeq < snapSeq {
		return projector.State{}, 0, fmt.Errorf("records up to #%d were compacted away: the earliest state the journal can show is at #%d", snapSeq, snapSeq)
	}
	var n uint64
	errUntil := errors.New("until")
	err = j.ScanBatches(snapSeq+1, untilSeq, func(batch []event.Record) error {
		if !untilTime.IsZero() {
			if i := slices.IndexFunc(batch, func(r event.Record) bool { return r.Time.After(untilTime) }); i >= 0 {
				s = projector.Replay(s, batch[:i])
				n += uint64(i)
				return errUntil
			}
		}
		s = projector.Replay(s, batch)
		n += uint64(len(batch))
		return nil
	})
	if err != nil && err != errUntil {
		return s, n, err
	}
	return s, n, nil
}

// ShortDigest abbreviates a sha256 digest for a person, as a refusal
// journaled or a command's output names it.
func ShortDigest(d string) string {
	if h, ok := strings.CutPrefix(d, "sha256:"); ok && len(h) > 12 {
		return "sha256:" + h[:12]
	}
	return d
}
