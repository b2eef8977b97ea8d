package main

import (
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/packaging"
)

type planCmd struct {
	Select   string        `name:"select" placeholder:"SELECTOR" help:"Only the nodes whose labels match, as in nodes --select (default: every node)."`
	File     string        `name:"file" placeholder:"FILE" help:"Plan this declaration for every selected node, its mesh and node replaced by each node's (default: what the profiles render for each node, or its stored declaration when no profile selects it, at its next revision)."`
	Deadline time.Duration `name:"deadline" default:"10s" help:"How long to wait for the nodes' answers; a node that has not answered by then is offline."`
	JSON     bool          `name:"json" help:"Print JSON lines, one node each, instead of the plans grouped."`
	OwnUnit  string        `name:"own-unit" default:"mesh-host.service" help:"The hosts' own unit, which no declaration may name (with --file)."`
}

// Help is shown under the command's usage.
func (c *planCmd) Help() string {
	return `Each selected node is sent its declaration (what the profiles render for it, as meshctl
render shows; its stored one when no profile selects it; or --file), signed for planning only, and answers with what
applying it would change on its machine now, computed as mesh-host plan computes it. Nothing is
stored, nothing changes on the nodes, and each node journals one plan.answered record.

Nodes with the same plan (the same steps, to the same content) are shown once, with their count
and names, and each file's content diff; then the nodes offline (not connected, or no answer
within --deadline), refused (the node would refuse the declaration), busy (planning or applying
already) and failed. The last line counts them, naming the nodes whose plan foresees a failure
(a step that would fail, such as a parent directory that does not exist).

Exit status: 0 when every selected node answered with a plan and no plan foresees a failure,
whether changes are pending or not, so that "meshctl plan ... && meshctl rollout ..." rolls out
only then; 1 when any node's plan foresees a failure or any node did not answer with a plan
(offline, refused, busy, failed); 2 for a bad selector or file, or no node selected.`
}

func (c *planCmd) Run(e *env) error {
	sel, err := labels.Parse(c.Select)
	if err != nil {
		return command.Refused("--select: %v", err)
	}
	var file *declaration.Declaration
	if c.File != "" {
		if file, err = readPlanFile(c.File, c.OwnUnit); err != nil {
			return err
		}
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	all, err := cl.Nodes(e.ctx)
	if err != nil {
		return err
	}
	var nodes []string
	for _, n := range client.Select(all, sel) {
		nodes = append(nodes, n.Node)
	}
	if len(nodes) == 0 {
		return command.Refused("no node matches --select %q", c.Select)
	}
	doc := client.Document(cl.NextStored)
	if file != nil {
		doc = cl.FileDocument(file)
	} else if profiles, err := cl.Profiles(e.ctx); err != nil {
		return err
	} else if len(profiles) > 0 {
		if doc, err = cl.RenderedDocument(e.ctx); err != nil {
			return err
		}
	}
	results := cl.Plan(e.ctx, nodes, doc, client.PlanOptions{Deadline: c.Deadline})
	return fleetview.PrintPlans(e.stdout, results, c.JSON)
}

// readPlanFile reads a declaration to plan for many nodes, refusing what
// declare would refuse before reaching for the broker.
func readPlanFile(path, ownUnit string) (*declaration.Declaration, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, command.Refused("%v", err)
	}
	if err != nil {
		return nil, failed("%v", err)
	}
	defer f.Close()
	d, err := declaration.Read(path, f)
	if err != nil && !errors.Is(err, declaration.ErrInvalid) {
		return nil, failed("%v", err)
	}
	if err == nil {
		err = d.RefuseInstallation(declaration.Installation{
			Unit: ownUnit, Package: packaging.PackageName, Versions: packaging.VersionsDir, Paths: packaging.InstalledPaths(),
		})
	}
	if err != nil {
		return nil, command.Refused("%v", err)
	}
	return d, nil
}
