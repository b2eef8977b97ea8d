package service

import (
	"fmt"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// acceptOverLocal admits a declaration from the mesh while a local
// override is in force (`mesh-host apply --local`). Only a reclaim is
// taken, whatever the local revision, ordered against the mesh's own last
// revision alone; it ends the override. Anything else is refused naming
// the override, and so is the reclaim the override set aside: a stored
// reclaim answers every hello, and must not take back an override made
// after it. Called with the admission lock held.
func (h *LinkHost) acceptOverLocal(d *linkproto.Declaration, decl *declaration.Declaration, l *projector.LocalOverride,
	trigger event.Trigger, ack linkproto.Ack, refuse func(*declaration.Declaration, error) linkproto.Ack) linkproto.Ack {
	switch {
	case !d.Reclaim:
		return refuse(decl, fmt.Errorf("%s; it refuses the mesh's declarations until `meshctl declare %s FILE --reclaim` takes it back",
			OverrideText(l), d.Node))
	case d.Signature == l.MeshSignature:
		return refuse(decl, fmt.Errorf("%s; this reclaim (revision %d) was taken before the override began: declare again with a new revision and --reclaim",
			OverrideText(l), d.Revision))
	case decl.Revision < l.MeshRevision:
		return refuse(decl, fmt.Errorf("reclaim revision %d is older than the mesh's revision %d that the local override set aside: an old declaration never replays over a new one",
			decl.Revision, l.MeshRevision))
	}
	// Ordered above against the mesh's revision alone: the admission's
	// own revision check is against what is desired, the local one.
	if err := h.admit(decl, projector.State{}); err != nil {
		return refuse(decl, err)
	}
	seq, _, err := hostjournal.AppendDeclarationAs(h.held.Journal, decl, hostjournal.Declared(decl.Expanded()), "link:"+string(trigger), d,
		hostjournal.As{ReclaimedRevision: l.Revision, Received: true})
	if err != nil {
		ack.Reason = fmt.Sprintf("journal the declaration: %v", err)
		return ack
	}
	ack.Accepted, ack.Seq = true, seq
	h.woken(trigger)
	return ack
}

// OverrideText says what local override is in force, for a refusal and
// for status.
func OverrideText(l *projector.LocalOverride) string {
	by := ""
	if l.User != "" {
		by = " by " + l.User
	}
	return fmt.Sprintf("the node is under a LOCAL OVERRIDE: revision %d from %s%s since %s (#%d)",
		l.Revision, l.Source, by, l.At.Format(time.RFC3339), l.Seq)
}
