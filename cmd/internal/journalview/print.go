// Package journalview prints journal records for a person or a program: the
// table and the JSON lines of `mesh-host journal`, and of `meshctl journal`,
// which shows the same records from the control plane's events stream.
package journalview

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/journal/event"
)

// Printer prints records as a fixed-width table (so that a follower's
// lines line up without buffering the whole output) or as JSON lines.
type Printer struct {
	w       *bufio.Writer
	json    bool
	started bool
}

// NewPrinter prints to w: JSON lines when asJSON, else the table.
func NewPrinter(w io.Writer, asJSON bool) *Printer {
	return &Printer{w: bufio.NewWriter(w), json: asJSON}
}

// TimeLayout is how records and reports show a time.
const TimeLayout = "2006-01-02T15:04:05Z07:00"

// Print prints one record (after the table's header, the first time).
func (p *Printer) Print(r event.Record) error {
	if p.json {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		p.w.Write(b)
		return p.w.WriteByte('\n')
	}
	if !p.started {
		p.started = true
		fmt.Fprintf(p.w, "%7s  %-20s  %-20s  %6s  %-28s  %s\n", "SEQ", "TIME", "KIND", "CAUSE", "RESOURCE", "DETAIL")
	}
	cause, res := "-", "-"
	if r.Cause != 0 {
		cause = fmt.Sprint(r.Cause)
	}
	if r.Resource != "" {
		res = r.Resource
	}
	detail := describe(r.Payload)
	if !event.Known(r.Kind) {
		detail = "(kind unknown to this version) " + detail
	}
	_, err := fmt.Fprintf(p.w, "%7d  %-20s  %-20s  %6s  %-28s  %s\n", r.Seq, r.Time.UTC().Format(TimeLayout), r.Kind, cause, res, detail)
	return err
}

// Flush writes what Print buffered.
func (p *Printer) Flush() error { return p.w.Flush() }

// maxValue bounds one value in the detail column.
const maxValue = 72

// describe renders a JSON payload as key=value pairs in the payload's own
// field order. A declaration's document is shown by size only.
func describe(payload []byte) string {
	if len(payload) == 0 {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return clip(string(payload))
	}
	var parts []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		var val string
		switch {
		case key == "signature" || key == "mesh_signature":
			// Shown as the signer; `journal --verify` checks it.
			continue
		case key == "signer":
			var signer string
			_ = json.Unmarshal(raw, &signer)
			key, val = "signed", signer
			if len(val) > 12 {
				val = val[:12] + "…"
			}
		case key == "document":
			var doc []byte
			_ = json.Unmarshal(raw, &doc)
			val = fmt.Sprintf("%d bytes", len(doc))
		case len(raw) > 0 && raw[0] == '"':
			_ = json.Unmarshal(raw, &val)
			if val == "" || strings.ContainsAny(val, " =\t\n") {
				val = string(raw)
			}
		default:
			val = string(raw)
		}
		if !whole[key] {
			val = clip(val)
		}
		parts = append(parts, key+"="+val)
	}
	return strings.Join(parts, " ")
}

// whole are the payload fields shown uncut in the table: an error or a
// reason is what the operator reads the journal for, and its end ("declare
// the directory /srv") is often the part that says what to do. The last
// column holds them, so a long one wraps rather than shifting the others.
var whole = map[string]bool{"error": true, "reason": true, "refused": true, "note": true}

func clip(s string) string {
	if len(s) <= maxValue {
		return s
	}
	// Cut on a rune boundary: a name may be in any script.
	return strings.ToValidUTF8(s[:maxValue-3], "") + "..."
}

// IsOrigin reports whether a kind starts a cause chain: what the mesh asked
// for, or what the host found changed behind its back.
func IsOrigin(k event.Kind) bool {
	return k == event.DeclarationReceived || k == event.DeclarationRefused || k == event.DriftObserved
}

// Restored returns the spec a chain's repair restored its resource to:
// the chain ends at a drift.observed, after the records of its repair,
// and that is what the drift found changed from. ok is false for any other
// chain, a drift left as it was among them.
func Restored(chain []event.Record) (spec string, ok bool) {
	if len(chain) < 2 || chain[len(chain)-1].Kind != event.DriftObserved {
		return "", false
	}
	var p event.DriftObservedPayload
	if json.Unmarshal(chain[len(chain)-1].Payload, &p) != nil || p.Wanted == "" {
		return "", false
	}
	return p.Wanted, true
}

// HeldBy reports whether decl, a declaration.received, declares resource
// at spec: the declaration that a repair to spec held the resource to.
func HeldBy(decl event.Record, resource, spec string) bool {
	if decl.Kind != event.DeclarationReceived {
		return false
	}
	var p event.DeclarationReceivedPayload
	if json.Unmarshal(decl.Payload, &p) != nil {
		return false
	}
	return slices.ContainsFunc(p.Resources, func(d event.DeclaredResource) bool {
		return d.ID == resource && d.SpecDigest == spec
	})
}

// Why is what `journal --why` shows of a resource.
type Why struct {
	// Chain is the cause chain behind the resource's latest record,
	// newest first, down to a record that starts one (IsOrigin) or as far
	// as the records go.
	Chain []event.Record
	// HeldBy, when not nil, is the declaration a repaired drift restored
	// the resource to (Restored, HeldBy): the drift is the chain's cause,
	// and the declaration what the resource is as.
	HeldBy *event.Record
	// DroppedBy, when not nil, is the first declaration after the
	// resource's latest record that no longer declares it (Declares): a
	// resource dropped without a record of its own (one that failed and
	// was never applied, when a revert or an edit left it out) would
	// otherwise end its story at the failure.
	DroppedBy *event.Record
}

// Declares reports whether decl, a declaration.received, declares
// resource, at any spec.
func Declares(decl event.Record, resource string) bool {
	if decl.Kind != event.DeclarationReceived {
		return false
	}
	var p event.DeclarationReceivedPayload
	if json.Unmarshal(decl.Payload, &p) != nil {
		return false
	}
	return slices.ContainsFunc(p.Resources, func(d event.DeclaredResource) bool { return d.ID == resource })
}

// PrintWhy prints why a resource is as it is, as `journal --why` shows it:
// the declaration that dropped it, if one did; the cause chain, newest
// first, and, when the chain does not reach a record that starts one
// (IsOrigin), why it stops; the declaration that holds a repaired drift.
// gone says what became of a cause that is not there ("was compacted
// away", "the events stream does not hold"). As JSON, each is a record
// line, in that order; the records' cause links tell them apart.
func PrintWhy(w io.Writer, resource string, why Why, asJSON bool, gone string) error {
	out := NewPrinter(w, asJSON)
	if why.DroppedBy != nil {
		if !asJSON {
			fmt.Fprintf(w, "%s is no longer declared, since this declaration (nothing it caused names it):\n", resource)
		}
		if err := out.Print(*why.DroppedBy); err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			return err
		}
		if !asJSON {
			fmt.Fprintf(w, "before that, it was as it was because of, newest first:\n")
		}
	} else if !asJSON {
		fmt.Fprintf(w, "%s is as it is because of, newest first:\n", resource)
	}
	chain := why.Chain
	for _, r := range chain {
		if err := out.Print(r); err != nil {
			return err
		}
	}
	if why.HeldBy != nil {
		if err := out.Flush(); err != nil {
			return err
		}
		if !asJSON {
			fmt.Fprintf(w, "restored to what the declaration in force declares:\n")
		}
		if err := out.Print(*why.HeldBy); err != nil {
			return err
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if len(chain) == 0 || asJSON {
		return nil
	}
	if last := chain[len(chain)-1]; !IsOrigin(last.Kind) {
		if last.Cause == 0 {
			fmt.Fprintf(w, "(#%d names no cause)\n", last.Seq)
		} else {
			fmt.Fprintf(w, "(#%d was caused by #%d, which %s)\n", last.Seq, last.Cause, gone)
		}
	}
	return nil
}
