package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/statusview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/projector"
)

type statusCmd struct {
	Node  string `arg:"" name:"NODE" help:"The node whose state to show."`
	JSON  bool   `name:"json" help:"Print the report as JSON."`
	Owned bool   `name:"owned" help:"List every owned resource, not only the drifted and failed ones."`
}

// Run shows the projection the node last reported, as mesh-host status
// shows it on the node.
func (c *statusCmd) Run(e *env) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	rep, err := cl.Report(e.ctx, c.Node)
	if err != nil {
		return failed("%v", err)
	}
	if c.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Node    string          `json:"node"`
			Sent    time.Time       `json:"sent"`
			Digest  string          `json:"digest"`
			Current bool            `json:"current"`
			Omitted string          `json:"omitted,omitempty"`
			State   projector.State `json:"state"`
		}{rep.Node, rep.Sent, rep.Digest, rep.Current, rep.Omitted, rep.State})
	}
	current := "the latest: its last heartbeat names it"
	if !rep.Current {
		current = "not its latest: its last heartbeat names another (or none); a newer report is on its way"
	}
	header := [][2]string{
		{"node", fmt.Sprintf("%s of mesh %s", rep.Node, rep.Mesh)},
		{"reported", fmt.Sprintf("%s (%s ago), at head #%d; %s", rep.Sent.Format(time.RFC3339), e.now().Sub(rep.Sent).Round(time.Second), rep.State.Head, current)},
	}
	if rep.Omitted != "" {
		header = append(header, [2]string{"omitted", rep.Omitted})
	}
	o := statusview.Options{Header: header, AllOwned: c.Owned}
	// The report says what the node knew as it sent it: a link up, which
	// a node that stopped, was killed or went quiet since cannot take
	// back. Unknown (an error) leaves the report's word.
	if away, err := cl.Away(e.ctx, c.Node); err == nil && away != nil {
		o.Link = func(recorded string) string {
			state := away.State
			if away.Reason != "" {
				state += ": " + away.Reason
			}
			return fmt.Sprintf("last heard %s ago (%s); its report said: %s", e.now().Sub(away.Sent).Round(time.Second), state, recorded)
		}
	}
	return statusview.Print(e.stdout, rep.State, o)
}

type replayCmd struct {
	Node   string `arg:"" name:"NODE" help:"The node whose projection to rebuild."`
	Verify bool   `name:"verify" help:"Rebuild through the head of the node's latest report and compare the two; exit 1 when they differ."`
	Until  uint64 `name:"until" placeholder:"SEQ" help:"Rebuild through record SEQ only (default: every record the events stream holds)."`
	JSON   bool   `name:"json" help:"Print the rebuilt projection as JSON."`
}

// Run rebuilds the node's projection from its records in the events stream
// with the host's own projector: event sourcing at the fleet's level.
func (c *replayCmd) Run(e *env) error {
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	if c.Verify {
		if c.Until != 0 || c.JSON {
			return command.Refused("--verify takes neither --until nor --json: it replays through the head of the node's report")
		}
		rep, replayed, diff, err := cl.Verify(e.ctx, c.Node)
		if err != nil {
			return failed("%v", err)
		}
		if len(diff) == 0 {
			fmt.Fprintf(e.stdout, "replay of %d records from the events stream matches what %s reported at head #%d\n", replayed.Records, c.Node, rep.State.Head)
			return nil
		}
		fmt.Fprintf(e.stdout, "replay of %d records from the events stream disagrees with what %s reported at head #%d (replayed != reported):\n  %s\n",
			replayed.Records, c.Node, rep.State.Head, strings.Join(diff, "\n  "))
		return &command.ExitError{Code: command.ExitFailed, Err: fmt.Errorf("%s is not what its records say", c.Node)}
	}
	replayed, err := cl.Replay(e.ctx, c.Node, c.Until)
	if err != nil {
		return failed("%v", err)
	}
	// Nothing to replay of a name the mesh never knew: a typo, most
	// likely. (A node removed keeps its records, and replays.)
	if replayed.Records == 0 {
		if err := cl.MustKnow(e.ctx, c.Node); errors.Is(err, client.ErrUnknownNode) {
			return failed("%v", err)
		}
	}
	if c.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Records uint64          `json:"records"`
			State   projector.State `json:"state"`
		}{replayed.Records, replayed.State})
	}
	header := [][2]string{{"replayed", fmt.Sprintf("%d records of %s from the events stream", replayed.Records, c.Node)}}
	return statusview.Print(e.stdout, replayed.State, statusview.Options{Header: header})
}
