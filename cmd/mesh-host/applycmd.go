package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/tuning"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/localsock"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/service"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

type applyCmd struct {
	File string `arg:"" type:"path" help:"The declaration: YAML, or JSON when the name ends in .json."`
	// Local is required on an enrolled host: a file applied there steps
	// outside the mesh (see localapply.go).
	Local bool `help:"On a host enrolled in a mesh: apply it anyway, as a local override the mesh sees and must reclaim (meshctl declare NODE FILE --reclaim)."`
	// LocalUser is who ran the command, forwarded to the service, which
	// does not share the client's environment.
	LocalUser string `name:"local-user" hidden:"" help:"Who ran the command (forwarded to the service)."`
}

// readDeclaration parses the file a person handed a command, reading no
// more of it than the limit on a declaration's size.
func readDeclaration(path string) (*declaration.Declaration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil {
		tuning.PaceForDocument(fi.Size())
	}
	return declaration.Read(path, f)
}

func (c *applyCmd) Run(e *env) error {
	decl, err := readDeclaration(c.File)
	if err == nil {
		e.budgetFor(len(decl.Resources))
	}
	source := "file:" + c.File
	forward := []string{"apply", c.File}
	if c.Local {
		forward = []string{"apply", "--local", "--local-user", localUser(os.Getenv, os.Getuid()), c.File}
	}
	return e.withWriteJournal(forward, func(j *journal.Journal) error {
		if err != nil {
			return refuse(j, source, nil, err)
		}
		node, enrolled := e.enrolment()
		if enrolled && !c.Local {
			return refuse(j, source, decl, errOutsideMesh(node, c.File))
		}
		// Inside the service, a push may be admitted meanwhile: the
		// revision check and the append go together.
		unlock := e.admitting()
		s, _, lerr := e.storedState(j)
		if lerr != nil {
			unlock()
			return failed("%v", lerr)
		}
		numbering, err := numberLocal(decl, s)
		if err != nil {
			unlock()
			return failed("%v", err)
		}
		// Enrolled, it is a local override (admitLocal orders it);
		// else a file applied as ever.
		var as hostjournal.As
		var aerr error
		if enrolled {
			as, aerr = e.admitLocal(decl, s, e.overrideUser(c.LocalUser))
		} else {
			aerr = e.admissible(decl, s)
		}
		if aerr != nil {
			unlock()
			return refuse(j, source, decl, aerr)
		}
		if numbering != "" {
			fmt.Fprintln(e.stdout, numbering)
		}
		specs := decl.Expanded()
		declared := hostjournal.Declared(specs)
		recv, digest, err := hostjournal.AppendDeclarationAs(j, decl, declared, source, nil, as)
		unlock()
		if err != nil {
			return failed("journal the declaration: %v", err)
		}
		// The parsed declaration is let go for the reconcile, which
		// applies specs, copies of its resources: held with them, it
		// would be live through the apply's peak for nothing.
		applied := fmt.Sprintf("revision %d of %s/%s from %s (%s)", decl.Revision, decl.Mesh, decl.Node, c.File, hostjournal.ShortDigest(digest))
		revision := decl.Revision
		decl = nil
		if err := e.openSecrets(specs); err != nil {
			return failed("%v", err)
		}
		// Accepting a declaration changes what is desired, not what is
		// owned: the owned set read while planning is the one before it.
		rc, err := e.reconciler(j, s)
		if err != nil {
			return failed("%v", err)
		}
		defer closeDrivers(rc.Drivers)
		res, err := rc.Reconcile(e.ctx, agent.Request{
			Trigger: event.TriggerManual, Cause: recv, Revision: revision,
			Specs: specs, Digests: hostjournal.SpecDigests(specs, declared), Owned: hostjournal.StoredOwned{J: j}, Repair: true,
			Owed: s.Refreshes, Interrupted: s.Pending,
		})
		if err != nil {
			return failed("reconcile: %v", err)
		}
		fmt.Fprintln(e.stdout, applied)
		if as.Local {
			fmt.Fprintf(e.stdout, "a LOCAL OVERRIDE by %s: the mesh's declarations are refused until `meshctl declare %s FILE --reclaim`\n", as.User, orNode(node))
		}
		printOutcomes(e.stdout, res, false, false)
		if res.Failures() > 0 {
			return command.Silent(command.ExitFailed)
		}
		return nil
	})
}

// budgetFor bounds a command's memory by the size of the declaration it
// works on (tuning.SetMemoryBudget). Inside the service it does nothing:
// the service returns its memory after each reconcile (ReturnHeap), and a
// limit would outlive the command.
func (e *env) budgetFor(resources int) {
	if e.held == nil {
		tuning.SetMemoryBudget(tuning.BudgetFor(resources))
	}
}

// admissible refuses a declaration older than the one applied, or one that
// names the host's own unit: the installation owns the host.
func (e *env) admissible(d *declaration.Declaration, s projector.State) error {
	if s.Desired != nil && d.Revision < s.Desired.Revision {
		return fmt.Errorf("revision %d is older than revision %d, already applied (declared at #%d): an old declaration never replays over a new one",
			d.Revision, s.Desired.Revision, s.Desired.Seq)
	}
	return e.admitContent(d)
}

// admitContent refuses a declaration that names the host's own
// installation, or secrets this node cannot open: whatever its revision.
func (e *env) admitContent(d *declaration.Declaration) error {
	if err := d.RefuseInstallation(e.installation()); err != nil {
		return err
	}
	// Secrets that are not sealed to this node are refused at the door,
	// not found failing at every reconcile. The values opened here are
	// dropped: they are opened again, in memory, when applied.
	return e.checkSecrets(d.Resources)
}

// admitting takes the service's admission lock, when running inside the
// service, and returns its unlock.
func (e *env) admitting() (unlock func()) {
	if e.held == nil {
		return func() {}
	}
	e.held.Admitting.Lock()
	return e.held.Admitting.Unlock
}

// refuse journals a refused declaration and returns exit 2 with the reason.
func refuse(j *journal.Journal, source string, d *declaration.Declaration, reason error) error {
	if err := hostjournal.AppendRefusal(j, source, d, reason); err != nil {
		return failed("%v", err)
	}
	return &command.ExitError{Code: command.ExitRefused, Err: fmt.Errorf("refused, nothing applied:\n%v", reason)}
}

// withWriteJournal runs fn against the journal opened for writing: the
// service's own when running inside it; the running service's, by asking
// it to run `forward` (absolute paths: it has another working directory);
// else the file, opened here.
func (e *env) withWriteJournal(forward []string, fn func(j *journal.Journal) error) error {
	if e.held != nil {
		e.held.Reconciling.Lock()
		if e.held.StandingAside {
			e.held.Reconciling.Unlock()
			return failed("the service is standing aside for a newer version; nothing was done: ask again once it is back")
		}
		defer e.held.AfterClientReconcile()
		defer e.held.Reconciling.Unlock()
		if err := e.held.Journal.Damage(); err != nil {
			return damageStop(err)
		}
		return fn(e.held.Journal)
	}
	if e.cli.Journal == "" {
		code, err := localsock.Call(e.ctx, e.cli.socketPath(), append(e.globalArgs(), forward...), e.stdout, e.stderr)
		if err == nil {
			return command.Silent(code)
		}
		if !errors.Is(err, localsock.ErrNoService) {
			return failed("ask the running service: %v", err)
		}
	}
	j, err := hostjournal.Open(e.cli.journalPath())
	if err != nil {
		return failed("%w", err)
	}
	defer j.Close()
	// Before anything is appended: not a record is added to a file whose
	// projection is damaged, not even a refusal. The projection (every
	// value, checked) and the head record (at open) are what an append
	// stands on; the history behind them is the scrub's to read.
	s, head, err := hostjournal.StoredCore(j)
	if err != nil {
		return failed("%w", err)
	}
	e.verified = &verifiedState{s: s, head: head}
	defer func() { e.verified = nil }()
	return fn(j)
}

// globalArgs repeats the global flags that change what a command does to
// the machine, for a command forwarded to the service.
func (e *env) globalArgs() []string {
	return []string{"--root", e.cli.Root, "--versions", e.cli.Versions, "--own-unit", e.cli.OwnUnit, "--parallel", strconv.Itoa(e.cli.Parallel)}
}

// printOutcomes prints what a reconcile did (or, planned, would do); with
// changesOnly, not the resources that were as declared.
func printOutcomes(w io.Writer, res *agent.Result, planned, changesOnly bool) {
	b := bufio.NewWriter(w)
	defer b.Flush()
	head := "OUTCOME"
	if planned {
		head = "PLAN"
	}
	fmt.Fprintf(b, "%-44s  %-10s  %s\n", "RESOURCE", head, "DETAIL")
	for _, s := range res.Steps {
		what := s.Outcome
		if planned || what == "" {
			what = s.Planned
		}
		if s.Drift && !planned && s.Outcome == "" {
			what = "drifted"
		}
		if changesOnly && what == event.ActionUnchanged {
			continue
		}
		var detail []string
		if len(s.Observation.Differs) > 0 && what != event.ActionUnchanged && what != event.ActionCreate && what != agent.Skipped {
			detail = append(detail, "differs: "+strings.Join(s.Observation.Differs, ", "))
		}
		if s.Drift {
			detail = append(detail, "drift: changed outside the mesh")
		}
		if s.Err != nil {
			detail = append(detail, s.Err.Error())
		}
		if s.Note != "" {
			detail = append(detail, s.Note)
		}
		fmt.Fprintln(b, strings.TrimRight(fmt.Sprintf("%-44s  %-10s  %s", s.ID, what, strings.Join(detail, "; ")), " "))
	}
	for _, f := range res.Refreshes {
		what, detail := f.Did, "refresh: "+strings.Join(f.Sources, ", ")+" changed"
		switch {
		case planned:
			what, detail = f.How, "refresh: "+strings.Join(f.Why, "; ")
		case f.Err != nil:
			what, detail = "failed", fmt.Sprintf("refresh (%s) failed, still owed: %v", f.How, f.Err)
		case f.Did == "" && f.Note != "":
			what, detail = "refreshed", detail+"; "+f.Note
		case f.Did == "":
			what, detail = "owed", detail+"; not delivered"
		}
		fmt.Fprintln(b, strings.TrimRight(fmt.Sprintf("%-44s  %-10s  %s", f.Target, what, detail), " "))
	}
	var also string
	if res.Skipped > 0 {
		also += fmt.Sprintf(", %d skipped", res.Skipped)
	}
	if res.Refreshed+res.RefreshFailed > 0 {
		also += fmt.Sprintf(", %d refreshed", res.Refreshed)
	}
	if res.RefreshFailed > 0 {
		also += fmt.Sprintf(", %d refreshes failed", res.RefreshFailed)
	}
	switch {
	case planned:
	case changesOnly: // check: what it found matters as much as what it did
		drifted := 0
		for _, s := range res.Steps {
			if s.Drift {
				drifted++
			}
		}
		fmt.Fprintf(b, "%d drifted, %d changed, %d unchanged, %d failed%s\n", drifted, res.Changed, res.Unchanged, res.Failed, also)
	default:
		fmt.Fprintf(b, "%d changed, %d unchanged, %d failed%s\n", res.Changed, res.Unchanged, res.Failed, also)
	}
}

// reconciler wires the drivers for the root prefix, told what the stored
// state s remembers of users and groups. Its drivers are closed with
// closeDrivers once it has reconciled.
func (e *env) reconciler(j *journal.Journal, s projector.State) (*agent.Reconciler, error) {
	root, err := rootfs.Open(e.cli.Root)
	if err != nil {
		return nil, err
	}
	o := heldAccounts(s)
	o.redact = e.redactor().Redact
	return &agent.Reconciler{
		Journal:  j,
		Drivers:  newDrivers(root, o),
		Root:     root,
		Parallel: e.cli.Parallel,
		Release:  service.ReleaseVersions(e.cli.Versions),
		Now:      e.now,
	}, nil
}
