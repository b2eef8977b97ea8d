package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/service"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

const exitPending = 3 // plan: changes pending

type planCmd struct {
	File string `arg:"" type:"path" help:"The declaration: YAML, or JSON when the name ends in .json."`
}

// Run shows what apply would do, with a diff for each file's content. It
// changes nothing and journals nothing (a plan the control plane asks the
// service for journals one plan.answered record: see service.LinkHost.Plan).
func (c *planCmd) Run(e *env) error {
	decl, err := readDeclaration(c.File)
	if err != nil {
		return &command.ExitError{Code: command.ExitRefused, Err: fmt.Errorf("refused:\n%v", err)}
	}
	e.budgetFor(len(decl.Resources))
	var s projector.State
	err = e.withJournal(func(j *journal.Journal) error {
		s, _, err = hostjournal.StoredState(j)
		return err
	})
	var ee *command.ExitError
	switch {
	case errors.As(err, &ee) && errors.Is(ee.Err, journal.ErrNotExist):
		// No journal yet: the host owns nothing.
	case err != nil:
		return err
	}
	res, rc, err := e.dryRun(decl, s)
	var r planRefusal
	if errors.As(err, &r) {
		return &command.ExitError{Code: command.ExitRefused, Err: fmt.Errorf("refused:\n%v", r.err)}
	} else if err != nil {
		return failed("%v", err)
	}
	printOutcomes(e.stdout, res, true, false)
	for _, step := range res.Steps {
		if f, ok := step.Spec.(*drivers.FileSpec); ok && step.Planned != event.ActionUnchanged {
			if m := drivers.ModeOr(f.Mode, 0); f.SpecialBits && m&0o7000 != 0 {
				// Said on purpose, and still worth a second look.
				fmt.Fprintf(e.stdout, "\n%s: mode %04o sets setuid, setgid or sticky (special_bits: true)\n", f.Path, uint32(m))
			}
			if diff := contentDiff(rc.Root, f); diff != "" {
				fmt.Fprintf(e.stdout, "\n%s", diff)
			}
		}
	}
	if res.Pending() {
		return command.Silent(exitPending)
	}
	return nil
}

// planRefusal is dryRun's refusal of the declaration itself, as apply would
// refuse it: not a failure to plan.
type planRefusal struct{ err error }

func (r planRefusal) Error() string { return r.err.Error() }
func (r planRefusal) Unwrap() error { return r.err }

// dryRun plans decl against the root and the stored state s as apply would
// reconcile it, changing nothing and journaling nothing: what `mesh-host
// plan` shows, and what the service answers the control plane's plan
// requests with. A declaration apply would refuse is a planRefusal.
func (e *env) dryRun(decl *declaration.Declaration, s projector.State) (*agent.Result, *agent.Reconciler, error) {
	if err := e.admissible(decl, s); err != nil {
		return nil, nil, planRefusal{err}
	}
	rc, err := e.reconciler(nil, s)
	if err != nil {
		return nil, nil, err
	}
	defer closeDrivers(rc.Drivers) // a plan's diffs read the root, not the drivers
	specs := decl.Expanded()
	if err := e.openSecrets(specs); err != nil {
		return nil, nil, planRefusal{err}
	}
	res, err := rc.Reconcile(e.ctx, agent.Request{
		Trigger: event.TriggerManual, Revision: decl.Revision, Specs: specs, Owned: agent.OwnedMap(s.Owned), DryRun: true,
		Owed: s.Refreshes, Interrupted: s.Pending,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("plan: %w", err)
	}
	return res, rc, nil
}

// planStored is dryRun against the state j holds, with the content diff
// of each file it would change: the service's answer to a plan request.
func (e *env) planStored(j *journal.Journal, decl *declaration.Declaration) (*service.Planned, error) {
	s, _, err := hostjournal.StoredState(j)
	if err != nil {
		return nil, err
	}
	res, rc, err := e.dryRun(decl, s)
	if err != nil {
		return nil, err
	}
	p := &service.Planned{Result: res, Diffs: map[string]string{}}
	for _, step := range res.Steps {
		if f, ok := step.Spec.(*drivers.FileSpec); ok && step.Planned != event.ActionUnchanged {
			if diff := contentDiff(rc.Root, f); diff != "" {
				p.Diffs[step.ID] = diff
			}
		}
	}
	return p, nil
}

// contentDiff is a unified diff from the file's current content to the
// declared one; "" when they are the same. A secret's content is never
// shown, nor what the file holds now (it may be an older value of the
// secret): only that it changes.
func contentDiff(root *rootfs.Root, f *drivers.FileSpec) string {
	if f.Secret != nil {
		return fmt.Sprintf("%s: content is secret %q (sealed); not shown\n", f.Path, f.Secret.Name)
	}
	old, err := root.ReadFile(f.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("%s: cannot read the current content: %v\n", f.Path, err)
	}
	if string(old) == f.Content {
		return ""
	}
	from := f.Path
	if errors.Is(err, fs.ErrNotExist) {
		from = "/dev/null"
	}
	diff, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(string(old)), B: lines(f.Content),
		FromFile: from, ToFile: f.Path, Context: 3,
	})
	return diff
}

// lines splits s after each newline, keeping them, with no empty last line.
func lines(s string) []string {
	l := strings.SplitAfter(s, "\n")
	if l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}
