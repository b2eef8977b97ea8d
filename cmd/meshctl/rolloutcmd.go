package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/labels"
)

type rolloutCmd struct {
	Start  rolloutStartCmd  `cmd:"" default:"withargs" help:"Start a rollout (the default): push what the profiles render to the nodes SEL selects, in waves."`
	Status rolloutStatusCmd `cmd:"" help:"Show a rollout (default: the latest): its state, each wave, each node that failed."`
	List   rolloutListCmd   `cmd:"" help:"List the rollouts, oldest first."`
	Pause  rolloutPauseCmd  `cmd:"" help:"Pause a running rollout: nodes pushed to finish, no new node is pushed."`
	Resume rolloutResumeCmd `cmd:"" help:"Resume a paused rollout, or a halted one whose failed nodes have converged since."`
	Abort  rolloutAbortCmd  `cmd:"" help:"End a rollout; --revert declares to every node it pushed to the declaration it last converged before."`
}

// waveFlags say how a rollout goes, for rollout and release alike.
type waveFlags struct {
	Canary        int           `name:"canary" placeholder:"N" help:"Push N nodes first (those labelled canary, then by name), alone; any failure among them halts."`
	MaxInFlight   string        `name:"max-in-flight" placeholder:"N|P%" help:"Nodes per wave after the canaries (default: all at once)."`
	HaltOnFailure bool          `name:"halt-on-failure" default:"true" negatable:"" help:"Halt when a node of any wave fails (canaries always halt)."`
	WaitHealthy   time.Duration `name:"wait-healthy" default:"5m" help:"How long a pushed node may take to report converged before it counts as failed."`
	Offline       string        `name:"offline" enum:"defer,fail" default:"defer" help:"A node offline when its wave starts: defer (its declaration is stored for its next hello; it neither holds the wave back nor halts) or fail."`
	Detach        bool          `name:"detach" help:"Start it and return; meshctl serve drives it (see rollout status)."`
}

func (f *waveFlags) options(selector string) (rollout.Options, error) {
	if _, err := labels.Parse(selector); err != nil {
		return rollout.Options{}, command.Refused("--select: %v", err)
	}
	if _, err := rollout.ParseMaxInFlight(f.MaxInFlight, 100); err != nil {
		return rollout.Options{}, command.Refused("%v", err)
	}
	if f.WaitHealthy <= 0 {
		return rollout.Options{}, command.Refused("--wait-healthy %v: more than 0", f.WaitHealthy)
	}
	return rollout.Options{Selector: selector, Canary: f.Canary, MaxInFlight: f.MaxInFlight,
		HaltOnFailure: f.HaltOnFailure, WaitHealthy: f.WaitHealthy, OfflineFails: f.Offline == "fail"}, nil
}

type rolloutStartCmd struct {
	Select string `name:"select" placeholder:"SEL" required:"" help:"The nodes, by label (role=web,dc in (fra,ams),!canary); \"\" for every node."`
	waveFlags
}

func (c *rolloutStartCmd) Run(e *env) error {
	opt, err := c.options(c.Select)
	if err != nil {
		return err
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := cl.StartRollout(e.ctx, opt)
	if err != nil {
		return err
	}
	return follow(e, cl, r, c.Detach)
}

// follow prints r's start and, unless detached, its progress until it
// ends; a rollout that halts or is aborted is a failure.
func follow(e *env, cl *client.Client, r *rollout.Rollout, detach bool) error {
	fmt.Fprintf(e.stdout, "rollout %s: %s to %s in %s (canary %d, then %d at a time)\n", r.ID, r.Kind, fleetview.Plural(len(r.Nodes), "node"), fleetview.Plural(r.Waves(), "wave"), r.Canary, r.MaxInFlight)
	if len(r.Skipped) > 0 {
		fmt.Fprintf(e.stdout, "skipped %s no profile selects%s\n", fleetview.Plural(len(r.Skipped), "node"), listSome(r.Skipped))
	}
	if detach {
		fmt.Fprintf(e.stdout, "meshctl serve drives it; follow it with `meshctl rollout status %s`\n", r.ID)
		return nil
	}
	seen := map[string]rollout.Step{}
	for _, n := range r.Nodes {
		seen[n.Node] = n.Step
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastBar := ""
	for {
		select {
		case <-e.ctx.Done():
			fmt.Fprintf(e.stdout, "\nstopped following; rollout %s goes on (`meshctl rollout status %s`)\n", r.ID, r.ID)
			return nil
		case <-tick.C:
		}
		cur, err := cl.GetRollout(e.ctx, r.ID)
		if err != nil {
			if e.ctx.Err() != nil {
				continue
			}
			return err
		}
		if e.terminal == nil {
			for _, n := range cur.Nodes {
				if seen[n.Node] == n.Step {
					continue
				}
				seen[n.Node] = n.Step
				line := fmt.Sprintf("wave %d: %s %s", n.Wave, n.Node, n.Step)
				if n.Revision > 0 {
					line += fmt.Sprintf(" revision %d", n.Revision)
				}
				if n.Reason != "" {
					line += ": " + n.Reason
				}
				fmt.Fprintln(e.stdout, line)
			}
		} else if bar := progressBar(cur); bar != lastBar {
			fmt.Fprintf(e.terminal, "\r%s", bar)
			lastBar = bar
		}
		if cur.State.Active() {
			continue
		}
		if e.terminal != nil {
			fmt.Fprintln(e.terminal)
		}
		return ended(e, cur)
	}
}

// ended reports how r ended: done is success, anything else a failure.
func ended(e *env, r *rollout.Rollout) error {
	summary := fmt.Sprintf("%s, %d not pushed", r.Summary(), r.Counts()[rollout.StepPending])
	if r.State == rollout.Done {
		fmt.Fprintf(e.stdout, "rollout %s done: %s\n", r.ID, summary)
		return nil
	}
	return failed("rollout %s %s: %s; %s", r.ID, r.State, r.Reason, summary)
}

// progressBar is one line: a bar of the nodes done, and the counts.
func progressBar(r *rollout.Rollout) string {
	const width = 30
	counts := r.Counts()
	done := len(r.Nodes) - counts[rollout.StepPending] - counts[rollout.StepPushed]
	fill := 0
	if len(r.Nodes) > 0 {
		fill = done * width / len(r.Nodes)
	}
	reverted := ""
	if n := counts[rollout.StepDeferred]; n > 0 {
		reverted = fmt.Sprintf("  deferred %d", n)
	}
	if n := counts[rollout.StepReverted]; n > 0 {
		// A reverted node failed or converged first: counted as neither.
		reverted += fmt.Sprintf("  reverted %d", n)
	}
	return fmt.Sprintf("[%s%s] %d/%d  converged %d  unchanged %d  failed %d%s  %s ",
		strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, len(r.Nodes),
		counts[rollout.StepConverged], counts[rollout.StepUnchanged], counts[rollout.StepFailed], reverted, r.State)
}

type rolloutStatusCmd struct {
	ID     string `arg:"" optional:"" name:"ID" help:"The rollout (default: the latest)."`
	JSON   bool   `name:"json" help:"The rollout's record as JSON."`
	Events bool   `name:"events" help:"Every step it took, from the rollout events stream."`
}

func (c *rolloutStatusCmd) Run(e *env) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := cl.GetRollout(e.ctx, c.ID)
	if err != nil {
		return err
	}
	switch {
	case c.JSON:
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
		return nil
	case c.Events:
		evs, err := cl.RolloutEvents(e.ctx, r.ID)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			line := fmt.Sprintf("%s\t%s", ev.At.Format(time.RFC3339Nano), ev.Step)
			if ev.Node != "" {
				line += "\t" + ev.Node
			}
			if ev.Revision > 0 {
				line += fmt.Sprintf("\trevision %d", ev.Revision)
			}
			if ev.Detail != "" {
				line += "\t" + ev.Detail
			}
			fmt.Fprintln(e.stdout, line)
		}
		return nil
	}
	fmt.Fprintf(e.stdout, "rollout %s: %s %s, started by %s at %s, select %q\n", r.ID, r.Kind, r.State, r.Operator, r.Created.Format(time.RFC3339), r.Selector)
	if r.Reason != "" {
		fmt.Fprintf(e.stdout, "reason: %s\n", r.Reason)
	}
	if e.terminal != nil {
		fmt.Fprintln(e.stdout, progressBar(r))
	}
	for w := range r.Waves() {
		counts := map[rollout.Step]int{}
		total := 0
		for _, n := range r.Nodes {
			if n.Wave == w {
				counts[n.Step]++
				total++
			}
		}
		name := fmt.Sprintf("wave %d", w)
		if w == 0 && r.Canary > 0 {
			name += " (canary)"
		}
		var parts []string
		for _, s := range []rollout.Step{rollout.StepConverged, rollout.StepUnchanged, rollout.StepPushed, rollout.StepPending, rollout.StepFailed, rollout.StepDeferred, rollout.StepReverted} {
			if counts[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
			}
		}
		fmt.Fprintf(e.stdout, "%s: %s: %s\n", name, fleetview.Plural(total, "node"), strings.Join(parts, ", "))
	}
	for _, n := range r.Nodes {
		switch n.Step {
		case rollout.StepFailed:
			fmt.Fprintf(e.stdout, "failed %s (wave %d, revision %d): %s\n", n.Node, n.Wave, n.Revision, n.Reason)
		case rollout.StepDeferred:
			fmt.Fprintf(e.stdout, "deferred %s (wave %d, revision %d): %s\n", n.Node, n.Wave, n.Revision, n.Reason)
		}
	}
	// What the nodes' heartbeats say now, which the record, written
	// only while the rollout is driven, may not: a failed node that
	// converged since its halt, a deferred node that came back.
	for _, line := range cl.SinceHalt(e.ctx, r) {
		fmt.Fprintln(e.stdout, line)
	}
	return nil
}

type rolloutListCmd struct{}

func (c *rolloutListCmd) Run(e *env) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	all, err := cl.Rollouts(e.ctx)
	if err != nil {
		return err
	}
	for _, r := range all {
		counts := r.Counts()
		fmt.Fprintf(e.stdout, "%s\t%s\t%s\t%s\t%d nodes\t%d converged\t%d failed\t%s\n", r.ID, r.Kind, r.State, r.Operator, len(r.Nodes), counts[rollout.StepConverged], counts[rollout.StepFailed], r.Selector)
	}
	return nil
}

type rolloutPauseCmd struct {
	ID string `arg:"" optional:"" name:"ID" help:"The rollout (default: the latest)."`
}

func (c *rolloutPauseCmd) Run(e *env) error {
	return setRolloutState(e, c.ID, rollout.Paused)
}

type rolloutResumeCmd struct {
	ID     string `arg:"" optional:"" name:"ID" help:"The rollout (default: the latest)."`
	Detach bool   `name:"detach" help:"Resume it and return."`
}

func (c *rolloutResumeCmd) Run(e *env) error {
	if err := setRolloutState(e, c.ID, rollout.Running); err != nil || c.Detach {
		return err
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := cl.GetRollout(e.ctx, c.ID)
	if err != nil {
		return err
	}
	return follow(e, cl, r, false)
}

func setRolloutState(e *env, id string, to rollout.State) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := cl.SetRolloutState(e.ctx, id, to, string(to)+" by "+cl.Operator)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "rollout %s %s\n", r.ID, r.State)
	return nil
}

type rolloutAbortCmd struct {
	ID     string `arg:"" optional:"" name:"ID" help:"The rollout (default: the latest)."`
	Revert bool   `name:"revert" help:"Declare to every node it pushed to, as a new revision, the declaration that node last converged before the rollout."`
}

func (c *rolloutAbortCmd) Run(e *env) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := cl.AbortRollout(e.ctx, e.stdout, c.ID, c.Revert)
	if r != nil && (err == nil || !errors.Is(err, client.ErrRefused)) {
		fmt.Fprintf(e.stdout, "rollout %s aborted\n", r.ID)
	}
	return err
}
