package linkproto

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// Size limits. A receiver refuses a larger message before decoding it. The
// embedded broker's max_payload is MaxDeclarationSize, so anything the
// broker accepts a node can at least refuse by name.
const (
	// MaxDeclarationSize bounds a Declaration or Welcome: the document
	// carries every file's content.
	MaxDeclarationSize = 8 << 20
	// MaxReportSize bounds every other message.
	MaxReportSize = 64 << 10
	// MaxEventSize bounds one journal record as sent upward. A larger
	// record (a declaration.received with a big document) is sent with its
	// payload replaced by an Omitted note; the node's own journal keeps it
	// whole.
	MaxEventSize = 512 << 10
	// MaxPlanAnswerSize bounds a PlanAnswer: PlanAnswer.Fit drops the
	// steps past it, and a receiver refuses more.
	MaxPlanAnswerSize = 256 << 10
	// MaxPlanDiffSize bounds one step's Diff in a PlanAnswer: a diff is
	// the node's word, shown on the operator's terminal, and one big file
	// must not crowd out the rest of the plan. ClipDiff cuts a longer one.
	MaxPlanDiffSize = 16 << 10
)

// Errors a receiver returns; each message names the field or limit.
var (
	// ErrMalformed is returned for a message that is not the JSON of its
	// type, or lacks a required field.
	ErrMalformed = errors.New("malformed message")
	// ErrTooLarge is returned for a message over its size limit.
	ErrTooLarge = errors.New("message too large")
	// ErrVersion is returned for a message of protocol version 0 or newer
	// than ProtocolVersion.
	ErrVersion = errors.New("unsupported protocol version")
	// ErrWrongNode is returned for a message about another mesh or node
	// than the receiver expects.
	ErrWrongNode = errors.New("message for another node")
)

// Declaration is a push: node's whole desired state, down on
// DeclarationSubject as a request. The node replies with an Ack.
type Declaration struct {
	Protocol int    `json:"protocol"`
	Mesh     string `json:"mesh"`
	Node     string `json:"node"`
	Revision uint64 `json:"revision"`
	// Document is the declaration's JSON (package declaration's wire
	// form); its own mesh, node and revision must equal the fields above.
	Document json.RawMessage `json:"document"`
	// Operator names who made the declaration (the identity meshctl ran
	// as). It is inside the signed part: the node journals it as a fact.
	Operator string `json:"operator,omitempty"`
	// Signer and Signature are the mesh's declaration key (public) and its
	// signature over signedBytes. A node refuses a declaration without
	// them, or signed by another key.
	Signer    string `json:"signer,omitempty"`
	Signature string `json:"signature,omitempty"`
	// Reclaim takes the node back from a local override (`mesh-host apply
	// --local`): a node under one refuses every other declaration from the
	// mesh. It is inside the signed part when set, so a broker or another
	// node cannot turn a push into a reclaim; a declaration without it
	// signs exactly as before it existed.
	Reclaim bool `json:"reclaim,omitempty"`
}

// Ack answers a Declaration. Accepted means journaled at Seq and to be
// applied now (or, if a newer one arrives first, superseded: pushes
// coalesce); a refused declaration is journaled too, with Reason.
type Ack struct {
	Protocol int    `json:"protocol"`
	Node     string `json:"node"`
	Revision uint64 `json:"revision"`
	Accepted bool   `json:"accepted"`
	Seq      uint64 `json:"seq,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// PlanRequest asks node, on PlanSubject as a request, what applying a
// declaration would change on its machine now. It is a Declaration in all
// but its signature, which is made for planning only (PlanRequest.Sign):
// the node checks it exactly as a push, changes nothing, journals one
// plan.answered record and replies with a PlanAnswer.
type PlanRequest Declaration

// PlanAnswer answers a PlanRequest. Refused says why the node made no plan
// (the request was not the mesh's or not for it, the declaration would be
// refused, the node is busy); Steps and the counts are then empty. Steps
// are the resources the plan changes, in the reconciler's order; those
// unchanged are only counted.
type PlanAnswer struct {
	Protocol int    `json:"protocol"`
	Node     string `json:"node"`
	Revision uint64 `json:"revision"`
	Refused  string `json:"refused,omitempty"`
	// Busy is set with Refused when the node was planning or applying
	// already: asking again later may succeed.
	Busy      bool       `json:"busy,omitempty"`
	Steps     []PlanStep `json:"steps,omitempty"`
	Unchanged int        `json:"unchanged"`
	// Omitted counts the steps left out to fit MaxPlanAnswerSize.
	Omitted int `json:"omitted,omitempty"`
	// Seq is the node's plan.answered record.
	Seq uint64 `json:"seq,omitempty"`
}

// PlanStep is one resource's part in a plan: what would be done to it,
// how it differs now, the error observing it met, and why, when that is
// not plain.
type PlanStep struct {
	ID      string       `json:"id"`
	Action  event.Action `json:"action"`
	Differs []string     `json:"differs,omitempty"`
	// Drift is set when the resource, applied by the mesh, was changed
	// outside it.
	Drift bool   `json:"drift,omitempty"`
	Error string `json:"error,omitempty"`
	// Note is the reconciler's remark on the step: why a resource no
	// longer declared is released rather than deleted.
	Note string `json:"note,omitempty"`
	// Digest identifies what the step would make the resource: the
	// declared spec's digest, a secret counted by its name (its sealed
	// form differs from node to node). Two nodes' plans are the same
	// only when their steps' digests are.
	Digest string `json:"digest,omitempty"`
	// Diff is the unified diff from a file's current content to the
	// declared one, as mesh-host plan prints it (a secret's content is
	// never in it), at most MaxPlanDiffSize (ClipDiff). It is the node's
	// text: a receiver escapes it before showing it.
	Diff string `json:"diff,omitempty"`
}

// diffCut ends a Diff that ClipDiff or Fit cut.
const diffCut = "\n… diff cut: %d bytes more (mesh-host plan on the node shows it whole)\n"

// ClipDiff returns diff cut to fit MaxPlanDiffSize, at a line's end where
// there is one, with a note saying so. A sender clips what it sends and a
// receiver what it received.
func ClipDiff(diff string) string {
	if len(diff) <= MaxPlanDiffSize {
		return diff
	}
	keep := MaxPlanDiffSize - len(diffCut) - 20
	if i := strings.LastIndexByte(diff[:keep], '\n'); i > 0 {
		keep = i + 1
	}
	return diff[:keep] + fmt.Sprintf(diffCut, len(diff)-keep)
}

// encodedLen is the length of s encoded as a JSON string.
func encodedLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
}

// Fit makes a encode within MaxPlanAnswerSize: it first leaves out the
// diffs from the end (a note says so), then drops steps from the end,
// counting them in Omitted. The steps matter more than their diffs.
func (a *PlanAnswer) Fit() {
	size := len(Marshal(a))
	for i := len(a.Steps) - 1; i >= 0 && size > MaxPlanAnswerSize; i-- {
		if d := a.Steps[i].Diff; d != "" {
			// Measured as encoded, so that a plan of many diffs is not
			// encoded once per diff.
			a.Steps[i].Diff = fmt.Sprintf(diffCut, len(d))
			size -= encodedLen(d) - encodedLen(a.Steps[i].Diff)
		}
	}
	for len(a.Steps) > 0 && len(Marshal(a)) > MaxPlanAnswerSize {
		drop := max(1, len(a.Steps)/8)
		a.Steps = a.Steps[:len(a.Steps)-drop]
		a.Omitted += drop
	}
}

// Hello is what a node says, as a request on HelloSubject, on every link up:
// it asks for its latest declaration and how much of its journal the events
// stream holds.
type Hello struct {
	Protocol int    `json:"protocol"`
	Node     string `json:"node"`
	Version  string `json:"version"`
	// Revision is the latest revision the node accepted; 0 for none.
	Revision uint64 `json:"revision"`
	// Head is the node's journal head.
	Head uint64 `json:"head"`
	// Nonce is fresh for every hello; the Welcome signs it back, so an
	// old welcome replayed by the broker does not verify.
	Nonce string `json:"nonce,omitempty"`
	// Local says the node holds a local override: Revision is then the
	// override's, not the mesh's, and the welcome carries the stored
	// declaration when it is a reclaim, whatever its revision.
	Local bool `json:"local,omitempty"`
}

// Welcome answers a Hello.
type Welcome struct {
	Protocol int `json:"protocol"`
	// Declaration is the node's stored desired state when its revision is
	// newer than the Hello's, or it is a reclaim and the Hello says Local;
	// nil otherwise.
	Declaration *Declaration `json:"declaration,omitempty"`
	// EventsThrough is the highest journal sequence of the node the events
	// stream holds; 0 for none.
	EventsThrough uint64 `json:"events_through"`
	// Nonce is the Hello's; Signer and Signature sign the welcome with the
	// mesh's declaration key (see Welcome.Sign).
	Nonce     string `json:"nonce,omitempty"`
	Signer    string `json:"signer,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// Sync is a node's question, as a request on SyncSubject: how much of my
// journal does the events stream hold? Sent is the last record the node
// published.
type Sync struct {
	Protocol int    `json:"protocol"`
	Node     string `json:"node"`
	Sent     uint64 `json:"sent"`
	// Nonce is fresh for every sync; the Synced signs it back.
	Nonce string `json:"nonce,omitempty"`
}

// Synced answers a Sync: EventsThrough is the journal sequence of the
// node's last record in the events stream; 0 for none. A node publishes
// its records in order on one connection, so the stream holds every one up
// to it that this connection sent.
type Synced struct {
	Protocol      int    `json:"protocol"`
	EventsThrough uint64 `json:"events_through"`
	// Nonce is the Sync's; Signer and Signature sign the answer with the
	// mesh's declaration key (see Synced.Sign).
	Nonce     string `json:"nonce,omitempty"`
	Signer    string `json:"signer,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// Enrol is a host redeeming its token, as a request on EnrolSubject with
// the token's bootstrap user. It carries the public half of the key the
// host made; the private half never leaves the host.
type Enrol struct {
	Protocol int `json:"protocol"`
	// Token is the token exactly as `meshctl enrol` printed it.
	Token string `json:"token"`
	// Key is the node's public user nkey (starting with U).
	Key string `json:"key"`
	// SealKey is the node's public sealing key (starting with X): what the
	// control plane seals the node's secrets to. Told here, with the token
	// that proves the node, and nowhere else.
	SealKey string `json:"seal_key"`
	// Nonce is fresh; the Credential signs it back.
	Nonce string `json:"nonce"`
}

// Renew is a node asking, on RenewSubject, for its credentials signed
// again for the key it holds, before they expire.
type Renew struct {
	Protocol int    `json:"protocol"`
	Node     string `json:"node"`
	Key      string `json:"key"`
	Nonce    string `json:"nonce"`
}

// Credential answers an Enrol or a Renew: the node's user JWT for its key
// and when it expires, or, when Refused is set, why not (nothing else is
// set then). It is signed with the mesh's declaration key and bound to the
// request's nonce.
type Credential struct {
	Protocol  int       `json:"protocol"`
	Node      string    `json:"node"`
	JWT       string    `json:"jwt,omitempty"`
	Expires   time.Time `json:"expires,omitzero"`
	Refused   string    `json:"refused,omitempty"`
	Nonce     string    `json:"nonce"`
	Signer    string    `json:"signer,omitempty"`
	Signature string    `json:"signature,omitempty"`
}

// Heartbeat is a node's report, on HeartbeatSubject: on link up, after
// every apply, and every Interval while idle.
type Heartbeat struct {
	Protocol int    `json:"protocol"`
	Mesh     string `json:"mesh"`
	Node     string `json:"node"`
	Version  string `json:"version"`
	// Build is the running binary's own label, given when it was built
	// (`packaging/build --version`): the name a person knows the version
	// by, beside Version's digest.
	Build string    `json:"build,omitempty"`
	Sent  time.Time `json:"sent"`
	// Interval is how often the node reports while idle: a node silent for
	// three intervals is silent.
	Interval Duration `json:"interval"`
	// Desired is the revision of the latest accepted declaration, Applied
	// that of the latest completed reconcile (converged or not).
	Desired uint64 `json:"desired"`
	Applied uint64 `json:"applied"`
	// Result is the latest reconcile's result.
	Result  event.Result `json:"result,omitempty"`
	Owned   int          `json:"owned"`
	Drifted int          `json:"drifted"`
	Failed  int          `json:"failed"`
	// LastReconcile is when the latest reconcile completed.
	LastReconcile time.Time `json:"last_reconcile,omitzero"`
	// Head is the journal head, Acked how much of it the events stream
	// acknowledged.
	Head   uint64   `json:"head"`
	Acked  uint64   `json:"acked"`
	Uptime Duration `json:"uptime"`
	// LastGood is the revision of the last declaration that converged (0
	// for none): a node whose Desired is newer is behind.
	LastGood uint64 `json:"last_good,omitempty"`
	// KnownGood is the host's known-good version; Bad the versions the
	// launcher rolled back from (see projector.State).
	KnownGood string   `json:"known_good,omitempty"`
	Bad       []string `json:"bad,omitempty"`
	// Report is the digest of the node's latest Report: when it changes,
	// the node has sent a new one (StateSubject).
	Report string `json:"report,omitempty"`
	// Stopping, in the last heartbeat a host sends as it stops on purpose,
	// says why ("the host is stopping"); Sent is when. The heartbeats
	// stream keeps each node's last, so it says the node left until it
	// is back. At most MaxStoppingBytes; the control plane cuts a longer
	// one.
	Stopping string `json:"stopping,omitempty"`
	// Local is the local override in force (`mesh-host apply --local`),
	// nil for none: the node holds a declaration the mesh did not make
	// and refuses the mesh's until it is reclaimed. Checked with
	// LocalReport.Check before it is shown.
	Local *LocalReport `json:"local,omitempty"`
}

// MaxStoppingBytes bounds Heartbeat.Stopping.
const MaxStoppingBytes = 256

// Report is a node's projection, replayed upward on StateSubject when it
// changes (and on every link up): what `meshctl status NODE` shows, and what
// `meshctl replay NODE --verify` rebuilds from the node's records in the
// events stream and compares. The declaration's document is left out (the
// control plane holds it), and so are the owned resources when they would
// not fit in one message even compressed (Omitted says so). It is sent as
// ReportOf makes it.
type Report struct {
	Protocol int             `json:"protocol"`
	Mesh     string          `json:"mesh"`
	Node     string          `json:"node"`
	Sent     time.Time       `json:"sent"`
	State    projector.State `json:"state"`
	Omitted  string          `json:"omitted,omitempty"`
}

// SentReport is a Report as its node sends it.
type SentReport struct {
	Report
	// Digest is ReportDigest(Report), which the heartbeats name.
	Digest string
	// Body is the Report's JSON, gzip-compressed past compressReportsOver
	// bytes; Encoding is then EncodingGzip, the EncodingHeader's value.
	Body     []byte
	Encoding string
}

// ReportOf makes the Report of s as sent, with its digest. The digest is
// over the state alone, so that it changes when the state does and only
// then.
func ReportOf(mesh, node string, s projector.State, now time.Time) SentReport {
	s = StrippedForReport(s)
	r := Report{Protocol: ProtocolVersion, Mesh: mesh, Node: node, Sent: now.UTC(), State: s}
	doc := Marshal(r)
	body, encoding := encodeBody(doc)
	if len(doc) > MaxReportJSON || len(body) > MaxDeclarationSize {
		r.State.Owned = nil
		r.Omitted = fmt.Sprintf("the %d owned resources: the report would not fit in one message", len(s.Owned))
		body, encoding = encodeBody(Marshal(r))
	}
	return SentReport{Report: r, Digest: ReportDigest(r), Body: body, Encoding: encoding}
}

// ReportDigest is the digest of r's state, as its node's heartbeats name
// it: a report whose digest is not the latest heartbeat's is not the
// node's latest.
func ReportDigest(r Report) string {
	b, _ := projector.Encode(r.State)
	sum := sha256.Sum256(append(b, r.Omitted...))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// StrippedForReport is s as a Report carries it: without the declaration's
// document. What a node reported is compared with its replayed records in
// this form.
func StrippedForReport(s projector.State) projector.State {
	s = s.Clone()
	if s.Desired != nil {
		s.Desired.Document = nil
	}
	return s
}

// HeartbeatOf fills the state part of a heartbeat from the host's State.
func HeartbeatOf(s projector.State) Heartbeat {
	h := Heartbeat{Protocol: ProtocolVersion, Head: s.Head, Owned: len(s.Owned)}
	if s.Desired != nil {
		h.Desired = s.Desired.Revision
	}
	if r := s.LastReconcile; r != nil {
		h.Applied, h.Result, h.LastReconcile = r.Revision, r.Result, r.Completed
	}
	for _, o := range s.Owned {
		if o.Drifted {
			h.Drifted++
		}
		if o.LastOutcome == event.ActionFailed {
			h.Failed++
		}
	}
	h.Failed += len(s.Failing)
	if g := s.LastGood; g != nil {
		h.LastGood = g.Revision
	}
	h.KnownGood, h.Bad = s.KnownGood, s.Bad
	if l := s.Local; l != nil {
		h.Local = &LocalReport{Revision: l.Revision, MeshRevision: l.MeshRevision, Source: l.Source, User: l.User, Since: l.At}
	}
	return h
}

// Omitted replaces the payload of a record too large to send upward.
type Omitted struct {
	Omitted string `json:"omitted"`
	Bytes   int    `json:"bytes"`
}

// EventBody encodes r as an events message body, within MaxEventSize.
func EventBody(r event.Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) <= MaxEventSize {
		return b, nil
	}
	n := len(r.Payload)
	if r.Kind == event.DeclarationReceived {
		// The document is what makes it large, and the control plane
		// holds it: the rest (revision, digest, resources, operator,
		// signature) still travels, so the node's projection can be
		// rebuilt upward as its report carries it, without the document.
		var fields map[string]json.RawMessage
		if json.Unmarshal(r.Payload, &fields) == nil {
			delete(fields, "document")
			fields["document_omitted"], _ = json.Marshal(fmt.Sprintf("%d bytes; the node's journal and the desired-state bucket hold it", n))
			if p, err := json.Marshal(fields); err == nil {
				r.Payload = p
				if b, err := json.Marshal(r); err == nil && len(b) <= MaxEventSize {
					return b, nil
				}
			}
		}
	}
	r.Payload, _ = json.Marshal(Omitted{Omitted: "payload too large to send; the node's journal holds it", Bytes: n})
	return json.Marshal(r)
}

// Duration is a time.Duration that travels as a string ("1m0s") and reads
// as one or as a number of nanoseconds.
type Duration time.Duration

// MarshalJSON writes d as a Go duration string, which needs no escaping:
// digits, a sign, a point and unit letters (µ is written as it is).
func (d Duration) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, time.Duration(d).String()), nil
}

// UnmarshalJSON reads a duration string or a number of nanoseconds. A
// string without escapes, which is every one MarshalJSON writes, is read
// as it is: a second JSON decode for each of a heartbeat's two durations
// was a sixth of reading 10,000 nodes' heartbeats.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && !bytes.ContainsRune(b[1:len(b)-1], '\\') {
		v, err := time.ParseDuration(string(b[1 : len(b)-1]))
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("a duration is a string like \"60s\" or a number of nanoseconds")
	}
	*d = Duration(n)
	return nil
}

// versioned is what every message starts with.
type versioned interface{ version() int }

func (m *Declaration) version() int { return m.Protocol }
func (m *Ack) version() int         { return m.Protocol }
func (m *PlanRequest) version() int { return m.Protocol }
func (m *PlanAnswer) version() int  { return m.Protocol }
func (m *Hello) version() int       { return m.Protocol }
func (m *Welcome) version() int     { return m.Protocol }
func (m *Heartbeat) version() int   { return m.Protocol }
func (m *Sync) version() int        { return m.Protocol }
func (m *Synced) version() int      { return m.Protocol }
func (m *Enrol) version() int       { return m.Protocol }
func (m *Renew) version() int       { return m.Protocol }
func (m *Credential) version() int  { return m.Protocol }
func (m *Report) version() int      { return m.Protocol }

// Decode reads data as the message type of into, refusing it when it is
// over limit bytes, not JSON of that type, or of a protocol version this
// end does not speak. Unknown fields are ignored.
func Decode(data []byte, limit int, into versioned) error {
	if len(data) > limit {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(data), limit)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the message", ErrMalformed)
	}
	switch v := into.version(); {
	case v == 0:
		return fmt.Errorf("%w: the message has no protocol field", ErrVersion)
	case v > ProtocolVersion:
		return fmt.Errorf("%w: protocol %d is newer than this end's %d", ErrVersion, v, ProtocolVersion)
	}
	return nil
}

// DecodeDeclaration reads a push for mesh/node: it must name them, carry a
// revision and a document. The document itself is checked by the node
// with package declaration.
func DecodeDeclaration(data []byte, mesh, node string) (*Declaration, error) {
	var d Declaration
	if err := Decode(data, MaxDeclarationSize, &d); err != nil {
		return nil, err
	}
	if err := d.For(mesh, node); err != nil {
		return nil, err
	}
	return &d, nil
}

// DecodePlanRequest reads a plan request for mesh/node, with the checks of
// DecodeDeclaration.
func DecodePlanRequest(data []byte, mesh, node string) (*PlanRequest, error) {
	var p PlanRequest
	if err := Decode(data, MaxDeclarationSize, &p); err != nil {
		return nil, err
	}
	if err := (*Declaration)(&p).For(mesh, node); err != nil {
		return nil, err
	}
	return &p, nil
}

// For checks that d is node's, complete enough to journal.
func (d *Declaration) For(mesh, node string) error {
	switch {
	case d.Mesh != mesh || d.Node != node:
		return fmt.Errorf("%w: the declaration is for %s/%s, this is %s/%s", ErrWrongNode, d.Mesh, d.Node, mesh, node)
	case d.Revision == 0:
		return fmt.Errorf("%w: revision: must be at least 1", ErrMalformed)
	case len(d.Document) == 0 || bytes.Equal(d.Document, []byte("null")):
		return fmt.Errorf("%w: document: required", ErrMalformed)
	}
	if d.Operator != "" {
		if err := ValidOperator(d.Operator); err != nil {
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	return nil
}

// Marshal encodes a message. The types here always encode; an error is a
// bug and panics. It does not escape <, > and & as json.Marshal does: a
// Declaration's Document is carried as it was signed, and escaped it
// would arrive other than signed and be refused for ever.
func Marshal(m any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		panic("linkproto: message does not encode: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
