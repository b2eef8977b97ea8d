package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/journalview"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

type journalCmd struct {
	JSON     bool     `name:"json" help:"Print JSON lines, one record each."`
	Since    string   `name:"since" placeholder:"SEQ|TIME|DURATION" help:"Start at a sequence number, an RFC 3339 time, or a duration ago (90m)."`
	Kind     []string `name:"kind" placeholder:"KIND" help:"Only records of this kind (repeatable)."`
	Resource string   `name:"resource" placeholder:"ID" help:"Only records about this resource (file:/etc/motd)."`
	Follow   bool     `name:"follow" short:"f" help:"Keep printing records as they are appended."`
	Why      string   `name:"why" placeholder:"ID" help:"Why is this resource as it is: walk the causes back from its latest record to the declaration or drift behind it (and, for a drift repaired, the declaration it was restored to)."`
	Verify   bool     `name:"verify" help:"Prove that every declaration taken from the link was signed by the mesh's key (exit 1 if one was not)."`
	Key      string   `name:"key" placeholder:"PUBKEY" help:"With --verify: the mesh's signing key to verify against (default: the one link.json holds)."`
}

func (c *journalCmd) Run(e *env) error {
	if c.Why != "" && (c.Follow || c.Since != "" || len(c.Kind) > 0 || c.Resource != "") {
		return command.Refused("--why takes no other filter")
	}
	if c.Verify {
		if c.Why != "" || c.Follow || c.Since != "" || len(c.Kind) > 0 || c.Resource != "" || c.JSON {
			return command.Refused("--verify takes no other flag but --key")
		}
		return e.withJournal(func(j *journal.Journal) error {
			// The operator's scrub: the whole file first, so that damage
			// anywhere in it stops this as it stops the service's.
			if err := hostjournal.Verify(j); err != nil {
				return failed("%w", err)
			}
			return verifyDeclarations(e, j, c.Key)
		})
	}
	if c.Key != "" {
		return command.Refused("--key goes with --verify")
	}
	from, since, err := parseSince(c.Since, e.now())
	if err != nil {
		return command.Refused("--since: %v", err)
	}
	// Said where the records are read: once, by the service when it runs
	// the command for this one.
	noteUnknownKinds := func() {
		for _, k := range c.Kind {
			if !event.Known(event.Kind(k)) {
				fmt.Fprintf(e.stderr, "mesh-host: note: kind %q is not one this version knows; showing any records of it\n", k)
			}
		}
	}
	out := journalview.NewPrinter(e.stdout, c.JSON)
	keep := func(r event.Record) bool {
		return r.Seq >= from && !r.Time.Before(since) &&
			(len(c.Kind) == 0 || slices.Contains(c.Kind, string(r.Kind))) &&
			(c.Resource == "" || r.Resource == c.Resource)
	}
	print := func(r event.Record) error {
		if keep(r) {
			return out.Print(r)
		}
		return nil
	}
	if c.Follow {
		noteUnknownKinds()
		err := e.follow(from, func(r event.Record) error {
			if err := print(r); err != nil {
				return err
			}
			return out.Flush()
		})
		if errors.Is(err, e.ctx.Err()) {
			return out.Flush()
		}
		return err
	}
	return e.withJournal(func(j *journal.Journal) error {
		if c.Why != "" {
			return c.why(e, j)
		}
		noteUnknownKinds()
		var err error
		// Use an index when one narrows the scan.
		switch {
		case c.Resource != "":
			err = j.ScanResource(c.Resource, from, print)
		case len(c.Kind) == 1:
			err = j.ScanKind(event.Kind(c.Kind[0]), from, print)
		default:
			err = j.Scan(from, 0, print)
		}
		if err != nil {
			return failed("%v", err)
		}
		return out.Flush()
	})
}

// why prints the cause chain behind a resource's latest record, newest
// first, down to the declaration or drift observation that started it.
func (c *journalCmd) why(e *env, j *journal.Journal) error {
	latest, ok, err := j.LatestFor(c.Why)
	if err != nil {
		return failed("%v", err)
	}
	if !ok {
		return failed("no record names resource %q", c.Why)
	}
	chain, err := j.Chain(latest.Seq)
	if err != nil {
		return failed("%v", err)
	}
	for i, r := range chain {
		if journalview.IsOrigin(r.Kind) {
			chain = chain[:i+1]
			break
		}
	}
	// The declaration in force, from the projection: what holds a
	// repaired resource, and whether a later one dropped it.
	var cur *projector.Desired
	err = j.Projection(func(v journal.View, _ uint64) error {
		var err error
		cur, err = projector.LoadDesired(v)
		return err
	})
	if err != nil {
		return failed("%v", hostjournal.AsDamage(j, err))
	}
	why := journalview.Why{Chain: chain}
	if why.HeldBy, err = heldBy(j, c.Why, chain, cur); err != nil {
		return failed("%v", err)
	}
	if why.DroppedBy, err = droppedBy(j, c.Why, latest.Seq, cur); err != nil {
		return failed("%v", err)
	}
	return journalview.PrintWhy(e.stdout, c.Why, why, c.JSON, "was compacted away")
}

// droppedBy is the first declaration after record after that no longer
// declares resource (journalview.Why.DroppedBy); nil when cur, the
// declaration in force, still declares it, and then no record is read.
func droppedBy(j *journal.Journal, resource string, after uint64, cur *projector.Desired) (*event.Record, error) {
	if cur == nil || cur.Seq <= after || slices.ContainsFunc(cur.Resources, func(d event.DeclaredResource) bool { return d.ID == resource }) {
		return nil, nil
	}
	var dropped *event.Record
	stop := errors.New("found")
	err := j.ScanKind(event.DeclarationReceived, after+1, func(r event.Record) error {
		if !journalview.Declares(r, resource) {
			dropped = &r
			return stop
		}
		return nil
	})
	if err != nil && !errors.Is(err, stop) {
		return nil, hostjournal.AsDamage(j, err)
	}
	return dropped, nil
}

// heldBy is cur, the declaration in force, when chain is a repaired drift
// and cur declares resource as the repair restored it; nil otherwise, or
// when its record was compacted away.
func heldBy(j *journal.Journal, resource string, chain []event.Record, cur *projector.Desired) (*event.Record, error) {
	spec, ok := journalview.Restored(chain)
	if !ok || cur == nil || cur.Seq == 0 {
		return nil, nil
	}
	r, ok, err := j.Get(cur.Seq)
	if err != nil || !ok || !journalview.HeldBy(r, resource, spec) {
		return nil, err
	}
	return &r, nil
}

// parseSince reads --since: a sequence number, an RFC 3339 time, or a
// duration before now. It returns a minimum sequence and a minimum time.
func parseSince(s string, now time.Time) (uint64, time.Time, error) {
	if s == "" {
		return 1, time.Time{}, nil
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return max(n, 1), time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return 1, t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return 1, now.Add(-d), nil
	}
	return 0, time.Time{}, fmt.Errorf("%q is not a sequence number, an RFC 3339 time or a duration", s)
}
