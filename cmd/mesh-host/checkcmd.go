package main

import (
	"fmt"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/tuning"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

type checkCmd struct {
	NoRepair bool `name:"no-repair" help:"Journal drift but change nothing."`
}

// Run observes every resource of the stored declaration, and every owned
// one, against the machine now: the drift timer's reconcile, by hand.
func (c *checkCmd) Run(e *env) error {
	forward := []string{"check"}
	if c.NoRepair {
		forward = append(forward, "--no-repair")
	}
	return e.withWriteJournal(forward, func(j *journal.Journal) error {
		res, err := e.reconcileStored(j, event.TriggerManual, !c.NoRepair)
		if err != nil {
			return failed("check: %v", err)
		}
		drifted := 0
		for _, s := range res.Steps {
			if s.Drift {
				drifted++
			}
		}
		if res.Started == 0 && drifted == 0 {
			fmt.Fprintf(e.stdout, "%d resources as declared; nothing drifted\n", res.Unchanged)
			return nil
		}
		printOutcomes(e.stdout, res, false, true)
		if res.Failures() > 0 || (c.NoRepair && drifted > 0) {
			return command.Silent(command.ExitFailed)
		}
		return nil
	})
}

// reconcileStored reconciles the root to the declaration the journal holds,
// and removes what the host owns that it no longer declares: what `check`,
// the service's start and its drift timer do.
func (e *env) reconcileStored(j *journal.Journal, trigger event.Trigger, repair bool) (*agent.Result, error) {
	s, _, err := e.storedState(j)
	if err != nil {
		return nil, err
	}
	if s.Desired == nil {
		// Nothing declared yet: nothing to hold, and nothing to remove
		// (Owned is left out, so nothing could be). The reconcile is
		// still journaled, quietly, so that what follows one (a version
		// confirmed after its first) has a record to follow.
		rc, err := e.reconciler(j, s)
		if err != nil {
			return nil, err
		}
		defer closeDrivers(rc.Drivers)
		return rc.Reconcile(e.ctx, agent.Request{Trigger: trigger, Repair: repair})
	}
	tuning.PaceForDocument(int64(max(s.Desired.DocumentBytes, len(s.Desired.Document))))
	doc, err := hostjournal.Document(j, s.Desired.Document, s.Desired.DocumentSHA256)
	if hostjournal.IsDamage(err) {
		return nil, err
	}
	var decl *declaration.Declaration
	if err == nil {
		decl, err = declaration.DecodeStored(doc)
	}
	if err == nil && decl.Revision != s.Desired.Revision {
		err = fmt.Errorf("it says revision %d where its record says %d", decl.Revision, s.Desired.Revision)
	}
	if err == nil {
		// Checked again, as at admission: a journal written by an older
		// host, or changed on disk, must not make this one touch itself.
		err = decl.RefuseInstallation(e.installation())
	}
	if err != nil {
		// Never reconcile to a document that is not the one accepted: an
		// empty one would remove everything the host owns.
		return nil, fmt.Errorf("the stored declaration (#%d) cannot be used: %w", s.Desired.Seq, err)
	}
	specs := decl.Expanded()
	e.budgetFor(len(specs))
	if err := e.openSecrets(specs); err != nil {
		return nil, fmt.Errorf("the stored declaration (#%d): %w", s.Desired.Seq, err)
	}
	req := agent.Request{
		Trigger: trigger, Owned: hostjournal.StoredOwned{J: j}, Repair: repair, Revision: decl.Revision,
		Specs: specs, Digests: hostjournal.SpecDigests(specs, s.Desired.Resources),
		Owed: s.Refreshes, Interrupted: s.Pending,
	}
	if trigger == event.TriggerPushed || trigger == event.TriggerReconnect {
		// Started by accepting the declaration: that is its cause.
		req.Cause = s.Desired.Seq
	}
	rc, err := e.reconciler(j, s)
	if err != nil {
		return nil, err
	}
	defer closeDrivers(rc.Drivers)
	return rc.Reconcile(e.ctx, req)
}
