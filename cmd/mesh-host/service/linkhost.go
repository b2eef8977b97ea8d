package service

import (
	"context"
	"fmt"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// LinkHost is the host as the link sees it: it admits declarations from
// the control plane into the journal held and wakes the reconcile loop.
type LinkHost struct {
	held  *Held
	admit func(*declaration.Declaration, projector.State) error
	// plan plans a declaration against the root, changing nothing
	// (Config.Plan); nil makes no plans.
	plan planFunc
	// wake carries the trigger of a declaration accepted; one slot, so
	// declarations accepted during an apply coalesce into one reconcile of
	// the latest (which Config.Reconcile reads from the journal).
	wake chan event.Trigger
}

var _ link.Host = (*LinkHost)(nil)

// NewLinkHost is the link's host for the journal held; admit refuses a
// declaration the host must not accept (Config.Admit), plan plans one
// (Config.Plan).
func NewLinkHost(held *Held, admit func(*declaration.Declaration, projector.State) error, plan planFunc) *LinkHost {
	return &LinkHost{held: held, admit: admit, plan: plan, wake: make(chan event.Trigger, 1)}
}

// Accept admits a declaration from the link: journaled as received (and
// reconciled soon) or as refused, with the reason in the Ack. It takes the
// admission lock only, never the reconcile lock, so a push is answered
// while an apply runs.
func (h *LinkHost) Accept(_ context.Context, d *linkproto.Declaration, trigger event.Trigger) linkproto.Ack {
	ack := linkproto.Ack{Protocol: linkproto.ProtocolVersion, Node: d.Node, Revision: d.Revision}
	source := "link:" + string(trigger)
	j := h.held.Journal
	refuse := func(decl *declaration.Declaration, reason error) linkproto.Ack {
		ack.Reason = reason.Error()
		if err := hostjournal.AppendRefusal(j, source, decl, reason); err != nil {
			ack.Reason = err.Error()
		}
		return ack
	}
	// The link verified the signature; a declaration reaching here
	// without one is a bug that must not become a journaled fact.
	if d.Signature == "" {
		return refuse(nil, fmt.Errorf("revision %d: %w: the link passed an unsigned declaration", d.Revision, linkproto.ErrUnsigned))
	}
	decl, err := declaration.ParseJSON("link", d.Document)
	if err != nil {
		return refuse(nil, err)
	}
	if decl.Mesh != d.Mesh || decl.Node != d.Node || decl.Revision != d.Revision {
		return refuse(decl, fmt.Errorf("the document is revision %d for %s/%s, the message revision %d for %s/%s",
			decl.Revision, decl.Mesh, decl.Node, d.Revision, d.Mesh, d.Node))
	}

	h.held.Admitting.Lock()
	defer h.held.Admitting.Unlock()
	// Admission needs the declaration accepted last, not what is owned:
	// read that alone, as pushes come on the latency-critical path.
	var s projector.State
	err = j.Projection(func(v journal.View, _ uint64) error {
		var err error
		if s.Desired, err = projector.LoadDesired(v); err != nil {
			return err
		}
		s.Local, err = projector.LoadLocal(v)
		return err
	})
	err = hostjournal.AsDamage(j, err)
	if err != nil {
		ack.Reason = fmt.Sprintf("read the stored state: %v", err)
		return ack
	}
	if s.Local != nil {
		return h.acceptOverLocal(d, decl, s.Local, trigger, ack, refuse)
	}
	if cur := s.Desired; cur != nil && cur.Revision == decl.Revision {
		if cur.Digest == decl.Digest() {
			// Said again (a retried push, a welcome after a lost ack):
			// already journaled, and applied or about to be.
			ack.Accepted, ack.Seq = true, cur.Seq
			return ack
		}
		return refuse(decl, fmt.Errorf("revision %d was already accepted (#%d) with another content (%s); a changed declaration needs a new revision",
			decl.Revision, cur.Seq, hostjournal.ShortDigest(cur.Digest)))
	}
	if err := h.admit(decl, s); err != nil {
		return refuse(decl, err)
	}
	seq, _, err := hostjournal.AppendDeclaration(j, decl, hostjournal.Declared(decl.Expanded()), source, d)
	if err != nil {
		ack.Reason = fmt.Sprintf("journal the declaration: %v", err)
		return ack
	}
	ack.Accepted, ack.Seq = true, seq
	h.woken(trigger)
	return ack
}

// woken wakes the reconcile loop for a declaration accepted.
func (h *LinkHost) woken(trigger event.Trigger) {
	select {
	case h.wake <- trigger:
	default: // a reconcile is already due; it reads the latest declaration
	}
}

// Head is the journal's last sequence.
func (h *LinkHost) Head() (uint64, error) {
	in, err := h.held.Journal.Info()
	return in.Head, err
}

// State is the stored projection.
func (h *LinkHost) State() (projector.State, error) {
	s, _, err := hostjournal.StoredState(h.held.Journal)
	return s, err
}
