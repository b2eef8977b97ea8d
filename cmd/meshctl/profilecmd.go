package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/profile"
)

type profileCmd struct {
	Set  profileSetCmd  `cmd:"" help:"Store a profile (new or changed) for the nodes SEL selects; nothing is pushed until a rollout."`
	List profileListCmd `cmd:"" help:"List the profiles: priority, selector, how many nodes each selects, who changed it last."`
	Show profileShowCmd `cmd:"" help:"Print a profile's source; --history lists every change, who and when."`
	Rm   profileRmCmd   `cmd:"" help:"Remove a profile; its history stays."`
}

type profileSetCmd struct {
	Name     string `arg:"" name:"NAME" help:"The profile's name (a DNS label)."`
	File     string `arg:"" name:"FILE" help:"The profile: YAML with resources and optional vars, no mesh, node or revision."`
	Select   string `name:"select" placeholder:"SEL" help:"The nodes it applies to, by label (role=web,dc in (fra,ams),!canary); empty selects every node."`
	Priority int    `name:"priority" default:"50" help:"Merge order: lower first in each node's declaration."`
}

func (c *profileSetCmd) Run(e *env) error {
	src, err := os.ReadFile(c.File)
	if err != nil {
		return command.Refused("%v", err)
	}
	p := profile.Profile{Name: c.Name, Selector: c.Select, Priority: c.Priority, File: c.File, Source: string(src)}
	// Checked before the broker is reached for: a typo is refused at once.
	if _, err := profile.Parse(p); err != nil {
		return command.Refused("%v", err)
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	nodes, err := cl.SetProfile(e.ctx, p, cl.Operator)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "stored profile %s (priority %d); it selects %s%s\n", c.Name, c.Priority, fleetview.Plural(len(nodes), "node"), listSome(nodes))
	fmt.Fprintf(e.stdout, "see the change with `meshctl diff --select '%s'`, push it with `meshctl rollout --select '%s'`\n", c.Select, c.Select)
	return nil
}

// listSome is ": a, b, c" for a few names, abbreviated past ten.
func listSome(names []string) string {
	if len(names) == 0 {
		return ""
	}
	const most = 10
	if len(names) > most {
		return fmt.Sprintf(": %s and %d more", strings.Join(names[:most], ", "), len(names)-most)
	}
	return ": " + strings.Join(names, ", ")
}

type profileListCmd struct {
	JSON bool `name:"json" help:"One JSON object per line."`
}

func (c *profileListCmd) Run(e *env) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	recs, err := cl.Profiles(e.ctx)
	if err != nil {
		return err
	}
	ls, err := cl.Labels(e.ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !c.JSON {
		fmt.Fprintln(tw, "PROFILE\tPRIORITY\tSELECT\tNODES\tCHANGED BY\tAT")
	}
	for _, r := range recs {
		sel, err := labels.Parse(r.Selector)
		if err != nil {
			return fmt.Errorf("stored profile %s: %w", r.Name, err)
		}
		n := 0
		for _, set := range ls {
			if sel.Matches(set) {
				n++
			}
		}
		if c.JSON {
			line, _ := json.Marshal(map[string]any{"name": r.Name, "priority": r.Priority, "select": r.Selector, "nodes": n, "operator": r.Operator, "at": r.At})
			fmt.Fprintf(e.stdout, "%s\n", line)
			continue
		}
		s := r.Selector
		if s == "" {
			s = "(every node)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", r.Name, r.Priority, s, n, r.Operator, r.At.Format(time.RFC3339))
	}
	return tw.Flush()
}

type profileShowCmd struct {
	Name    string `arg:"" name:"NAME" help:"The profile."`
	History bool   `name:"history" help:"List every change the control plane keeps, oldest first."`
}

func (c *profileShowCmd) Run(e *env) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	if c.History {
		hist, err := cl.ProfileHistory(e.ctx, c.Name)
		if err != nil {
			return err
		}
		for _, r := range hist {
			what := fmt.Sprintf("set priority %d select %q (%d bytes)", r.Priority, r.Selector, len(r.Source))
			if r.Removed {
				what = "removed"
			}
			fmt.Fprintf(e.stdout, "#%d\t%s\t%s\t%s\n", r.Revision, r.At.Format(time.RFC3339), r.Operator, what)
		}
		return nil
	}
	r, err := cl.Profile(e.ctx, c.Name)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "# profile %s, priority %d, select %q; set by %s at %s from %s\n", r.Name, r.Priority, r.Selector, r.Operator, r.At.Format(time.RFC3339), r.File)
	fmt.Fprint(e.stdout, r.Source)
	if !strings.HasSuffix(r.Source, "\n") {
		fmt.Fprintln(e.stdout)
	}
	return nil
}

type profileRmCmd struct {
	Name string `arg:"" name:"NAME" help:"The profile."`
}

func (c *profileRmCmd) Run(e *env) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := cl.RemoveProfile(e.ctx, c.Name, cl.Operator); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "removed profile %s; the nodes it selected keep what they have until a rollout\n", c.Name)
	return nil
}

type renderCmd struct {
	Node string `arg:"" name:"NODE" help:"The node."`
}

func (c *renderCmd) Run(e *env) error {
	if err := linkproto.ValidName(c.Node); err != nil {
		return command.Refused("%v", err)
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := cl.Render(e.ctx, c.Node)
	if errors.Is(err, profile.ErrNoProfile) {
		// What the operator asked is answered: nothing renders for it,
		// and the labels say why.
		all, err := cl.Labels(e.ctx)
		if err != nil {
			return err
		}
		has := "no labels"
		if set := all[c.Node]; len(set) > 0 {
			has = "labels " + set.String()
		}
		fmt.Fprintf(e.stderr, "%s: no profile selects it (%s); nothing renders for it, and a rollout leaves it alone\n", c.Node, has)
		return nil
	}
	if err != nil {
		return err
	}
	doc, err := r.Declaration.MarshalJSON()
	if err != nil {
		return err
	}
	state := "unchanged from the stored revision"
	if r.Changed {
		state = "changed: a rollout would push it"
	}
	fmt.Fprintf(e.stderr, "%s: revision %d from %s, %s (%s)\n", c.Node, r.Declaration.Revision, strings.Join(r.Profiles, ", "), state, r.Declaration.Digest())
	var out bytes.Buffer
	if err := json.Indent(&out, doc, "", "  "); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\n", out.Bytes())
	return nil
}

type diffCmd struct {
	Select string `name:"select" placeholder:"SEL" required:"" help:"The nodes to render, by label; \"\" for every node."`
}

func (c *diffCmd) Run(e *env) error {
	sel, err := labels.Parse(c.Select)
	if err != nil {
		return command.Refused("--select: %v", err)
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	diffs, err := cl.Diff(e.ctx, sel)
	if err != nil {
		return err
	}
	return fleetview.PrintDiff(e.stdout, diffs)
}
