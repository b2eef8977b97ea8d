package projector

import (
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/mesh-host/mesh-host/journal/event"
)

// Fold returns the State after r, given the State s after the record before
// it. Records must come in seq order; Fold does not check.
//
// Fold consumes s: the result may share s's map and slices and change them in
// place, so the caller must not use s afterwards (Clone it first to keep it).
func Fold(s State, r event.Record) State {
	var f folder
	f.fold(&s, r)
	return s
}

// localAfter is the local override in force once the declaration p
// (record r) is received: a local one begins or continues one, any other
// ends it. The record names the mesh's declaration it sets aside: the
// stored fold of a declaration does not read the one before it.
func localAfter(r event.Record, p *event.DeclarationReceivedPayload) *LocalOverride {
	if !p.Local {
		return nil
	}
	return &LocalOverride{Revision: p.Revision, Source: p.Source, User: p.User, Seq: r.Seq, At: r.Time.UTC(),
		MeshRevision: p.MeshRevision, MeshSignature: p.MeshSignature}
}

// Replay folds recs in order into from and returns the result. Like Fold, it
// consumes from.
func Replay(from State, recs []event.Record) State {
	f := folder{stream: len(recs) > 1}
	for i := range recs {
		f.fold(&from, recs[i])
	}
	return from
}

// folder holds one payload of each kind that needs fields, so that a replay
// decodes every record into the same memory instead of allocating a payload
// per record. Each is reset before use: encoding/json keeps fields that the
// input does not mention.
type folder struct {
	applied     event.ResourceAppliedPayload
	drift       event.DriftObservedPayload
	started     event.ReconcileStartedPayload
	completed   event.ReconcileCompletedPayload
	declaration event.DeclarationReceivedPayload
	host        event.HostStartedPayload
	version     event.VersionPayload
	rolledBack  event.VersionRolledBackPayload
	facts       event.HostFactsPayload
	link        event.LinkPayload
	owed        event.RefreshOwedPayload
	refreshed   event.RefreshDonePayload
	notRefresh  event.RefreshFailedPayload
	skipped     event.ResourceSkippedPayload

	// stream, if set, decodes payloads with one json.Decoder for the whole
	// replay. json.Unmarshal allocates and discards its decoding state on
	// every call, which costs a replay about a third of its time; a
	// Decoder keeps that state. It reads from in, which holds one payload
	// at a time; fed counts the bytes in has held.
	stream bool
	in     feed
	dec    *json.Decoder
	fed    int64
}

// decode fills p from a payload and reports whether it decoded. An empty
// payload decodes as the zero payload, as in event.Record.DecodePayload.
// The result is json.Unmarshal's in either mode.
func decode[P any](f *folder, raw []byte, p *P) bool {
	var zero P
	*p = zero // encoding/json leaves fields the input does not mention
	if len(raw) == 0 {
		return true
	}
	if f.stream {
		if f.dec == nil {
			f.dec = json.NewDecoder(&f.in)
		}
		f.in.b = raw
		f.fed += int64(len(raw))
		// The Decoder must have read exactly this payload: one JSON value
		// and nothing after it, not even space, else whatever is left
		// would prefix the next payload.
		if err := f.dec.Decode(p); err == nil && f.dec.InputOffset() == f.fed {
			return true
		}
		// Errors stick to a Decoder, and what Unmarshal makes of trailing
		// data is the rule, so it decides. Such payloads are rare.
		f.dec, f.fed, f.in.b = nil, 0, nil
		*p = zero
	}
	return json.Unmarshal(raw, p) == nil
}

// feed is the io.Reader behind a folder's Decoder.
type feed struct{ b []byte }

func (f *feed) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

// ignore checks that a payload of a kind that changes nothing but Head
// decodes, so that undecodable records are counted whatever their kind.
func ignore[P any](f *folder, raw []byte) bool {
	var p P
	return decode(f, raw, &p)
}

func (f *folder) fold(s *State, r event.Record) {
	s.Head = r.Seq
	ok := true
	switch r.Kind {
	case event.ResourceApplied:
		if ok = decode(f, r.Payload, &f.applied); ok {
			ok = s.applied(r, &f.applied)
		}
		if ok {
			// Applied or failed, it was reached: no longer skipped.
			delete(s.Skipped, r.Resource)
		}
	case event.DriftObserved:
		if ok = decode(f, r.Payload, &f.drift); ok {
			if o, owned := s.Owned[r.Resource]; owned {
				o.Drifted = true
				s.Owned[r.Resource] = o
			}
		}
	case event.ReconcileStarted:
		if ok = decode(f, r.Payload, &f.started); ok {
			p := &f.started
			s.Pending = &Pending{Seq: r.Seq, Trigger: p.Trigger, Revision: p.Revision, Plan: nilIfEmpty(p.Plan)}
		}
	case event.ReconcileCompleted:
		if ok = decode(f, r.Payload, &f.completed); ok {
			p := &f.completed
			s.LastReconcile = &Reconcile{
				Seq:       r.Seq,
				Trigger:   p.Trigger,
				Revision:  p.Revision,
				Result:    p.Result,
				Started:   p.Started.UTC(),
				Completed: r.Time.UTC(),
				Changed:   p.Changed,
				Unchanged: p.Unchanged,
				Failed:    p.Failed,
				Quiet:     p.Quiet,
			}
			s.Pending = nil
			// Converged, and of the declaration last received: that is
			// the last-known-good one (a reconcile of an older revision,
			// overtaken by a push while it ran, is not).
			if d := s.Desired; p.Result == event.ResultConverged && d != nil && d.Revision == p.Revision {
				s.LastGood = &LastGood{Revision: d.Revision, Digest: d.Digest, Seq: d.Seq, Converged: r.Seq, At: r.Time.UTC()}
			}
		}
	case event.DeclarationReceived:
		if ok = decode(f, r.Payload, &f.declaration); ok {
			p := &f.declaration
			s.Local = localAfter(r, p)
			s.Desired = &Desired{
				Revision:  p.Revision,
				Digest:    p.Digest,
				Resources: nilIfEmpty(p.Resources),
				Seq:       r.Seq,
				Document:  nilIfEmpty(p.Document),

				DocumentSHA256: p.DocumentSHA256,
				DocumentBytes:  p.DocumentBytes,
				Source:         p.Source,
				Operator:       p.Operator,
				Signer:         p.Signer,
				Signature:      p.Signature,
				Reclaim:        p.Reclaim,
			}
			// What the declaration no longer names is no longer failing
			// or skipped: nothing of it was applied, and nothing will be;
			// and it is owed no refresh.
			for id := range s.Failing {
				if !declares(p.Resources, id) {
					delete(s.Failing, id)
				}
			}
			for id := range s.Skipped {
				if !declares(p.Resources, id) {
					delete(s.Skipped, id)
				}
			}
			for id := range s.Refreshes {
				if !declares(p.Resources, id) {
					delete(s.Refreshes, id)
				}
			}
		}
	case event.HostStarted:
		if ok = decode(f, r.Payload, &f.host); ok {
			s.Running = &Running{Version: f.host.Version, Build: f.host.Build, PID: f.host.PID, Since: r.Time.UTC(), Seq: r.Seq}
		}
	case event.VersionDelivered, event.VersionConfirmed, event.VersionRetired:
		if ok = decode(f, r.Payload, &f.version); ok {
			v := f.version.Version
			switch r.Kind {
			case event.VersionConfirmed:
				s.KnownGood = v
				s.Bad = removeVersion(s.Bad, v)
			case event.VersionDelivered:
				s.Versions = append(removeVersion(s.Versions, v), v)
			case event.VersionRetired:
				s.Versions = removeVersion(s.Versions, v)
				s.Bad = removeVersion(s.Bad, v)
			}
		}
	case event.LinkUp, event.LinkDown:
		if ok = decode(f, r.Payload, &f.link); ok {
			s.Link = Link{Up: r.Kind == event.LinkUp, Broker: f.link.Broker, Since: r.Time.UTC(), Reason: f.link.Reason}
		}
	// The launcher's choice shows in the next host.started, so a rollback
	// changes neither Running nor KnownGood; the version it rolled back
	// from is bad.
	case event.VersionRolledBack:
		if ok = decode(f, r.Payload, &f.rolledBack); ok && f.rolledBack.From != "" {
			s.Bad = append(removeVersion(s.Bad, f.rolledBack.From), f.rolledBack.From)
		}
	case event.VersionStoodAside:
		ok = ignore[event.VersionStoodAsidePayload](f, r.Payload)
	case event.DeclarationRefused:
		ok = ignore[event.DeclarationRefusedPayload](f, r.Payload)
	case event.DeclarationReapplied:
		// The declaration desired, accepted again: Desired stays as it is,
		// and keeps naming the record that holds the document.
		ok = ignore[event.DeclarationReappliedPayload](f, r.Payload)
	case event.JournalCompacted:
		ok = ignore[event.JournalCompactedPayload](f, r.Payload)
	case event.JournalScrubbed:
		ok = ignore[event.JournalScrubbedPayload](f, r.Payload)
	case event.HostFacts:
		if ok = decode(f, r.Payload, &f.facts); ok {
			facts := f.facts
			facts.Addresses = nilIfEmpty(slices.Clone(facts.Addresses))
			s.Facts = &facts
		}
	case event.LinkPlaintext:
		ok = ignore[event.LinkPlaintextPayload](f, r.Payload)
	case event.RefreshOwed:
		if ok = decode(f, r.Payload, &f.owed) && validID(r.Resource); ok {
			s.owe(r, &f.owed)
		}
	case event.RefreshDone:
		if ok = decode(f, r.Payload, &f.refreshed) && validID(r.Resource); ok {
			delete(s.Refreshes, r.Resource)
		}
	case event.RefreshFailed:
		if ok = decode(f, r.Payload, &f.notRefresh) && validID(r.Resource); ok {
			if o, owed := s.Refreshes[r.Resource]; owed {
				o.Error, o.FailedSeq = f.notRefresh.Error, r.Seq
				s.Refreshes[r.Resource] = o
			}
		}
	case event.ResourceSkipped:
		if ok = decode(f, r.Payload, &f.skipped) && validID(r.Resource); ok {
			if s.Skipped == nil {
				s.Skipped = make(map[string]Skip)
			}
			s.Skipped[r.Resource] = Skip{Requirement: f.skipped.Requirement, Seq: r.Seq}
		}
	case event.PlanAnswered:
		// A plan changes nothing: the machine, and so the state, is as it
		// was.
		ok = ignore[event.PlanAnsweredPayload](f, r.Payload)
	default:
		if !event.Known(r.Kind) {
			s.Unknown++
			return
		}
		// A kind added to the vocabulary after this switch was written
		// changes nothing here until a rule is added for it.
		_, err := r.DecodePayload()
		ok = err == nil
	}
	if !ok {
		s.Undecodable++
	}
}

// applied folds a resource.applied record. It reports false, changing
// nothing, for a record that names no resource or an action this binary
// does not know.
func (s *State) applied(r event.Record, p *event.ResourceAppliedPayload) bool {
	if !validID(r.Resource) {
		return false
	}
	// outcome is the constant rather than the decoded string, so that a
	// State does not keep one copy of "created" per resource.
	var outcome event.Action
	switch p.Action {
	case event.ActionCreate:
		outcome = event.ActionCreate
	case event.ActionUpdate:
		outcome = event.ActionUpdate
	case event.ActionUnchanged:
		outcome = event.ActionUnchanged
	case event.ActionDelete, event.ActionReleased:
		delete(s.Owned, r.Resource)
		delete(s.Failing, r.Resource)
		for made, by := range s.Made {
			if by == r.Resource {
				delete(s.Made, made)
			}
		}
		return true
	case event.ActionFailed:
		o, owned := s.Owned[r.Resource]
		if !owned {
			// Never applied, so not owned: a later removal has nothing
			// to delete (drivers apply atomically: a failed create
			// leaves nothing behind), and the owned count is what the
			// host holds. It is failing.
			if s.Failing == nil {
				s.Failing = make(map[string]Failure)
			}
			s.Failing[r.Resource] = Failure{SpecDigest: p.SpecDigest, Error: p.Error, Seq: r.Seq}
			return true
		}
		o.LastOutcome, o.Seq, o.Error = event.ActionFailed, r.Seq, p.Error
		s.own(r.Resource, o)
		return true
	default:
		return false
	}
	s.held(r.Resource, p.IDs)
	// Likewise an unchanged digest keeps the string the State holds.
	digest := p.SpecDigest
	if o, owned := s.Owned[r.Resource]; owned && o.SpecDigest == digest {
		digest = o.SpecDigest
	}
	delete(s.Failing, r.Resource)
	good := s.Owned[r.Resource].GoodRevision
	if s.Pending != nil {
		good = s.Pending.Revision
	}
	s.own(r.Resource, Owned{SpecDigest: digest, GoodRevision: good, LastOutcome: outcome, Seq: r.Seq})
	return true
}

func (s *State) own(id string, o Owned) {
	if s.Owned == nil {
		s.Owned = make(map[string]Owned)
	}
	s.Owned[id] = o
}

func removeVersion(vs []string, v string) []string {
	if i := slices.Index(vs, v); i >= 0 {
		vs = slices.Delete(vs, i, i+1)
	}
	if len(vs) == 0 {
		return nil
	}
	return vs
}

// nilIfEmpty keeps a State's slices in one form, so that a State and its
// Decode(Encode()) compare equal field by field.
func nilIfEmpty[E any](s []E) []E {
	if len(s) == 0 {
		return nil
	}
	return s
}

// validID: a record's resource becomes a JSON object key, which would not
// survive Encode if it were not UTF-8.
func validID(id string) bool { return id != "" && utf8.ValidString(id) }

// declares reports whether a declaration's resources name id.
func declares(resources []event.DeclaredResource, id string) bool {
	return slices.ContainsFunc(resources, func(d event.DeclaredResource) bool { return d.ID == id })
}

// owe folds a refresh.owed: the change joins the refresh its resource
// owes, once per source, bounded.
func (s *State) owe(r event.Record, p *event.RefreshOwedPayload) {
	if s.Refreshes == nil {
		s.Refreshes = make(map[string]OwedRefresh)
	}
	o, owed := s.Refreshes[r.Resource]
	if !owed {
		o = OwedRefresh{Since: r.Time.UTC(), Seq: r.Seq}
	}
	o.Refresh = p.Refresh
	switch {
	case slices.ContainsFunc(o.Sources, func(src RefreshSource) bool { return src.Resource == p.Source }):
	case len(o.Sources) >= MaxRefreshSources:
		o.More++
	default:
		o.Sources = append(o.Sources, RefreshSource{Resource: p.Source, Change: p.Change, Repair: p.Repair, Interrupted: p.Interrupted, Seq: r.Seq})
	}
	s.Refreshes[r.Resource] = o
}

// held remembers the ids a user or group resource holds, and what its
// apply made.
func (s *State) held(resource string, ids []event.HeldID) {
	for _, h := range ids {
		kind := map[string]string{"uid": "user", "gid": "group"}[h.Kind]
		if kind == "" || h.Name == "" || !utf8.ValidString(h.Name) {
			continue
		}
		if s.IDs == nil {
			s.IDs = make(map[string]string)
		}
		key := h.Kind + ":" + strconv.Itoa(h.ID)
		if _, taken := s.IDs[key]; !taken {
			s.IDs[key] = h.Name
		}
		if h.Made {
			if s.Made == nil {
				s.Made = make(map[string]string)
			}
			s.Made[kind+":"+h.Name] = resource
		}
	}
}
