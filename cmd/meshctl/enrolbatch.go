package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
)

// maxBatchLine bounds one line of an enrolment batch: a name and its labels.
const maxBatchLine = 64 << 10

// batchLine is one node of an enrolment batch.
type batchLine struct {
	node  string
	edits []string
}

// batchToken is one line of the batch's output.
type batchToken struct {
	Node    string    `json:"node"`
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// runBatch enrols every node of c.Batch: every line is checked first, and
// a bad one refuses the whole batch, naming FILE:LINE, before any token is
// issued or any label stored. The labels are stored next, in one pass, and
// the tokens are printed only when they are: a token printed is a node
// labelled as asked.
func (c *enrolCmd) runBatch(e *env) error {
	name, r := c.Batch, io.Reader(os.Stdin)
	if c.Batch == "-" {
		name = "stdin"
	} else {
		f, err := os.Open(c.Batch)
		if err != nil {
			return command.Refused("--batch: %v", err)
		}
		defer f.Close()
		r = f
	}
	lines, err := readBatch(name, r, c.Label)
	if err != nil {
		return command.Refused("--batch %v", err)
	}
	a, err := e.authority()
	if err != nil {
		return err
	}
	urls := c.URL
	if len(urls) == 0 {
		// Read once, not once a token.
		if urls, err = a.URLs(); err != nil {
			return err
		}
	}
	now := e.now()
	out := make([]batchToken, len(lines))
	var labelled []client.NodeEdits
	for i, l := range lines {
		enc, t, err := a.IssueToken(l.node, urls, now, c.TTL)
		if err != nil {
			return err
		}
		out[i] = batchToken{Node: l.node, Token: enc, Expires: t.Expires}
		if len(l.edits) > 0 {
			labelled = append(labelled, client.NodeEdits{Node: l.node, Edits: l.edits})
		}
	}
	if len(labelled) > 0 {
		cl, nc, err := e.client()
		if err != nil {
			return fmt.Errorf("labels: %w (enrol without them, and label the nodes later with meshctl label)", err)
		}
		defer nc.Close()
		if err := cl.LabelNewMany(e.ctx, cl.Operator, labelled); err != nil {
			return fmt.Errorf("labels: %w (no token was printed)", err)
		}
	}
	w := bufio.NewWriter(e.stdout)
	for _, t := range out {
		if c.JSON {
			b, _ := json.Marshal(t)
			fmt.Fprintf(w, "%s\n", b)
		} else {
			fmt.Fprintf(w, "%s %s\n", t.Node, t.Token)
		}
	}
	if err := w.Flush(); err != nil {
		return failed("%v", err)
	}
	if len(out) > 0 {
		fmt.Fprintf(e.stderr, "meshctl: %d tokens, each for `mesh-host enrol` on its own node only: each can be redeemed once, until %s\n",
			len(out), out[0].Expires.Local().Format(time.RFC3339))
	}
	return nil
}

// readBatch reads and checks an enrolment batch: NODE [KEY=VALUE ...] a
// line; blank lines and lines starting with # are skipped. Every node is a
// valid name and appears once; its edits are common's, then its own. Every
// line is checked, and the refusal names each bad one (the first
// maxBatchProblems): a batch of thousands is mended in one pass.
func readBatch(name string, r io.Reader, common []string) ([]batchLine, error) {
	if err := labels.CheckEdits(common); err != nil {
		return nil, fmt.Errorf("--label: %w", err)
	}
	var out []batchLine
	var problems []string
	bad := 0
	seen := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxBatchLine)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, n)
		l := batchLine{node: fields[0], edits: append(append([]string(nil), common...), fields[1:]...)}
		if err := checkBatchLine(l, fields[1:], seen, where); err != nil {
			if bad++; len(problems) < maxBatchProblems {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			}
			continue
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case bad == 1:
		return nil, errors.New(problems[0])
	case bad > 1:
		more := ""
		if bad > len(problems) {
			more = fmt.Sprintf("\n(and %d more)", bad-len(problems))
		}
		return nil, fmt.Errorf("%s: %d lines are refused, so no token is issued:\n%s%s", name, bad, strings.Join(problems, "\n"), more)
	case len(out) == 0:
		return nil, fmt.Errorf("%s: no node in it", name)
	}
	return out, nil
}

// maxBatchProblems is how many bad lines a refused batch names.
const maxBatchProblems = 20

// checkBatchLine checks one line of a batch: its node's name, that the
// node is not on an earlier line (seen, which it adds it to), and its
// labels.
func checkBatchLine(l batchLine, edits []string, seen map[string]string, where string) error {
	if err := linkproto.ValidName(l.node); err != nil {
		return err
	}
	if prev, ok := seen[l.node]; ok {
		return fmt.Errorf("%s is enrolled at %s already", l.node, prev)
	}
	seen[l.node] = where
	for _, edit := range edits {
		if !strings.Contains(edit, "=") {
			return fmt.Errorf("%q: a label is KEY=VALUE", edit)
		}
	}
	if _, err := (labels.Set{}).Apply(l.edits); err != nil {
		return err
	}
	return nil
}
