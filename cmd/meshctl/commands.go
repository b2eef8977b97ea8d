package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/packaging"
)

type initCmd struct {
	Mesh  string `name:"mesh" placeholder:"NAME" help:"The mesh's name (default \"home\" for a new authority)."`
	CA    string `name:"ca" placeholder:"FILE" type:"existingfile" help:"Adopt this CA certificate (PEM) as the mesh's, instead of creating one."`
	CAKey string `name:"ca-key" placeholder:"FILE" type:"existingfile" help:"The adopted CA's private key (PEM); without it the embedded broker needs --tls-cert."`
}

func (c *initCmd) Run(e *env) error {
	if c.CAKey != "" && c.CA == "" {
		return command.Refused("--ca-key needs --ca")
	}
	var adopt *authority.AdoptedCA
	if c.CA != "" {
		adopt = &authority.AdoptedCA{}
		var err error
		if adopt.Cert, err = os.ReadFile(c.CA); err != nil {
			return command.Refused("%v", err)
		}
		if c.CAKey != "" {
			if adopt.Key, err = os.ReadFile(c.CAKey); err != nil {
				return command.Refused("%v", err)
			}
		}
	}
	a, created, err := authority.InitWith(e.cli.Data, c.Mesh, adopt)
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(e.stdout, "created the authority of mesh %s in %s\n", a.Mesh, a.Dir)
	} else {
		fmt.Fprintf(e.stdout, "%s already holds the authority of mesh %s; reusing it\n", a.Dir, a.Mesh)
	}
	switch {
	case adopt == nil:
		fmt.Fprintf(e.stdout, "the mesh's CA is %s\n", a.CAFile())
	case a.HoldsCAKey():
		fmt.Fprintf(e.stdout, "adopted the CA in %s, with its key\n", a.CAFile())
	default:
		fmt.Fprintf(e.stdout, "adopted the CA in %s, without its key: the broker's certificate must come from you (serve --tls-cert, or nats-config)\n", a.CAFile())
	}
	return nil
}

type enrolCmd struct {
	Node  string        `arg:"" optional:"" name:"NODE" help:"The node's name (or --batch)."`
	Batch string        `name:"batch" placeholder:"FILE" help:"Enrol many nodes: FILE (- for standard input) has one line per node, NODE [KEY=VALUE ...]; prints NODE TOKEN per line. Every line is checked before any token is issued."`
	JSON  bool          `name:"json" help:"With --batch: print JSON lines, {\"node\", \"token\", \"expires\"} each."`
	URL   []string      `name:"url" placeholder:"URL" help:"Broker address the node connects to (repeatable; default: those control.json records)."`
	TTL   time.Duration `name:"ttl" default:"1h" help:"How long the token can be redeemed."`
	// Label needs the control service; the token alone does not.
	Label []string `name:"label" placeholder:"KEY=VALUE" help:"Label the node (repeatable; with --batch, every node, before its line's own): stored now, so the control service must be running."`
}

func (c *enrolCmd) Run(e *env) error {
	switch {
	case c.Batch != "" && c.Node != "":
		return command.Refused("give NODE or --batch, not both")
	case c.Batch != "":
		return c.runBatch(e)
	case c.Node == "":
		return command.Refused("give the node to enrol: meshctl enrol NODE (or --batch FILE)")
	case c.JSON:
		return command.Refused("--json goes with --batch")
	}
	a, err := e.authority()
	if err != nil {
		return err
	}
	if _, err := (labels.Set{}).Apply(c.Label); err != nil {
		return command.Refused("--label: %v", err)
	}
	enc, t, err := a.IssueToken(c.Node, c.URL, e.now(), c.TTL)
	if err != nil {
		return err
	}
	if len(c.Label) > 0 {
		cl, nc, err := e.client()
		if err != nil {
			return fmt.Errorf("--label: %w (enrol without it, and label the node later with meshctl label)", err)
		}
		defer nc.Close()
		// The node is not known until it redeems the token: the labels
		// are stored for it now, under the name the token is for.
		if _, err := cl.LabelNew(e.ctx, c.Node, cl.Operator, c.Label); err != nil {
			return fmt.Errorf("--label: %w", err)
		}
	}
	fmt.Fprintln(e.stdout, enc)
	fmt.Fprintf(e.stderr, "meshctl: give the token to `mesh-host enrol` on %s only: it can be redeemed once, until %s; the node makes its own key and a `meshctl serve` signs its credentials\n",
		c.Node, t.Expires.Local().Format(time.RFC3339))
	return nil
}

type revokeCmd struct {
	Node string `arg:"" name:"NODE" help:"The node whose access ends."`
}

func (c *revokeCmd) Run(e *env) error {
	if err := linkproto.ValidName(c.Node); err != nil {
		return command.Refused("%v", err)
	}
	return e.withAccounts(func(cl *client.Client, acc *nodeservice.Accounts) error {
		rec, err := cl.Revoke(e.ctx, c.Node, acc)
		if errors.Is(err, client.ErrNoRecord) {
			return command.Refused("%v", err)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "revoked %s (key %s): the broker closed its connection and refuses it; `meshctl enrol %s` to let it back\n", c.Node, rec.Key, c.Node)
		return nil
	})
}

// withAccounts runs fn with a client and the accounts, which push account
// changes (a revocation) as the system user.
func (e *env) withAccounts(fn func(cl *client.Client, acc *nodeservice.Accounts) error) error {
	a, err := e.authority()
	if err != nil {
		return err
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	sys, err := nodeservice.DialSystem(a, e.cli.NATS, false, nil)
	if err != nil {
		return err
	}
	defer sys.Close()
	return fn(cl, &nodeservice.Accounts{A: a, Sys: sys, Now: e.now})
}

type natsConfigCmd struct {
	JWTDir     string   `name:"jwt-dir" default:"jwt" placeholder:"DIR" help:"Where the server keeps the account JWTs it is pushed (relative to its working directory unless absolute)."`
	TLSDir     string   `name:"tls-dir" placeholder:"DIR" type:"path" help:"Issue the server a certificate and key from the mesh's CA into DIR, and name them in the tls block."`
	ServerName []string `name:"server-name" placeholder:"NAME" help:"A name or address nodes reach the server by (repeatable; with --tls-dir)."`
}

func (c *natsConfigCmd) Run(e *env) error {
	a, err := e.authority()
	if err != nil {
		return err
	}
	var t authority.NATSTLS
	switch {
	case c.TLSDir == "" && len(c.ServerName) > 0:
		return command.Refused("--server-name needs --tls-dir, where the certificate is written")
	case c.TLSDir != "" && len(c.ServerName) == 0:
		return command.Refused("--tls-dir needs --server-name: the names nodes reach the server by")
	case c.TLSDir != "" && !a.HoldsCAKey():
		return command.Refused("%v: the mesh's CA was adopted without its key; have your CA issue the server's certificate", authority.ErrNoCAKey)
	case c.TLSDir != "":
		if t.CertFile, t.KeyFile, err = a.WriteServerCert(c.TLSDir, c.ServerName, e.now()); err != nil {
			return failed("%v", err)
		}
		fmt.Fprintf(e.stderr, "meshctl: wrote %s and %s (its key, mode 0600) for %s\n", t.CertFile, t.KeyFile, strings.Join(c.ServerName, ", "))
	}
	fmt.Fprint(e.stdout, a.NATSConfig(c.JWTDir, t))
	return nil
}

type declareCmd struct {
	Node    string        `arg:"" name:"NODE" help:"The node the declaration is for."`
	File    string        `arg:"" name:"FILE" help:"The declaration: YAML, or JSON if it ends in .json."`
	Wait    time.Duration `name:"wait" default:"30s" help:"How long to wait for the node to report the apply (0: do not wait)."`
	OwnUnit string        `name:"own-unit" default:"mesh-host.service" help:"The hosts' own unit, which no declaration may name."`
	Force   bool          `name:"force" help:"Declare for a node the mesh does not know yet (never enrolled, nothing declared, never heard): a typo is refused without it."`
	Reclaim bool          `name:"reclaim" help:"Take the node back from a local override (mesh-host apply --local), whatever its local revision; the node refuses every other declaration while one is in force."`
}

func (c *declareCmd) Run(e *env) error {
	f, err := os.Open(c.File)
	if errors.Is(err, fs.ErrNotExist) {
		return command.Refused("%v", err)
	}
	if err != nil {
		return failed("%v", err)
	}
	// Read no more than the limit on a declaration's size.
	d, err := declaration.Read(c.File, f)
	f.Close()
	if err != nil && !errors.Is(err, declaration.ErrInvalid) {
		return failed("%v", err)
	}
	if err == nil {
		// The node refuses it by name too; refusing here keeps it out of
		// the stored desired state.
		err = d.RefuseInstallation(declaration.Installation{
			Unit: c.OwnUnit, Package: packaging.PackageName, Versions: packaging.VersionsDir, Paths: packaging.InstalledPaths(),
		})
	}
	if err != nil {
		return command.Refused("%v", err)
	}
	a, err := e.authority()
	if err != nil {
		return err
	}
	// What can be refused without the broker is refused before reaching
	// for it.
	if _, err := client.Push(d, a.Mesh, c.Node); err != nil {
		return err
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	if !c.Force {
		if err := cl.MustKnow(e.ctx, c.Node); err != nil {
			return command.Refused("%v (or --force to declare for it before it enrols)", err)
		}
	}
	return cl.Declare(e.ctx, e.stdout, c.Node, d, client.DeclareOptions{Wait: c.Wait, Reclaim: c.Reclaim})
}

type nodesCmd struct {
	JSON    bool   `name:"json" help:"Print JSON lines, one node each."`
	Summary bool   `name:"summary" help:"Print only the summary line: how many nodes in each state and on each version."`
	Select  string `name:"select" placeholder:"SELECTOR" help:"Only the nodes whose labels match, as in role=web,dc in (fra,ams),!canary (=, !=, in, notin, a key alone: has it, !key: has it not)."`
	Columns string `name:"columns" placeholder:"COL,COL" help:"The table's columns, in this order, from node, version, desired, applied, drifted, failed, last-heard, credential, labels, state (default: all of them, in that order)."`
}

func (c *nodesCmd) Run(e *env) error {
	if c.JSON && c.Summary {
		return command.Refused("--json or --summary, not both")
	}
	columns := fleetview.NodeColumns()
	if c.Columns != "" {
		if c.JSON || c.Summary {
			return command.Refused("--columns chooses the table's columns: not with --json or --summary")
		}
		var err error
		if columns, err = fleetview.ParseNodeColumns(c.Columns); err != nil {
			return command.Refused("--columns: %v", err)
		}
	}
	sel, err := labels.Parse(c.Select)
	if err != nil {
		return command.Refused("--select: %v", err)
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	nodes, err := cl.Nodes(e.ctx)
	if err != nil {
		return err
	}
	nodes = client.Select(nodes, sel)
	if c.Summary {
		fmt.Fprintln(e.stdout, fleetview.Summary(nodes))
		return nil
	}
	if c.JSON {
		return fleetview.PrintNodes(e.stdout, nodes, e.now(), true)
	}
	return fleetview.PrintNodeTable(e.stdout, nodes, e.now(), columns)
}

type labelCmd struct {
	Node  string   `arg:"" name:"NODE" help:"The node to label."`
	Edits []string `arg:"" optional:"" name:"LABEL" help:"key=value sets a label, key- removes one; none shows them."`
}

func (c *labelCmd) Run(e *env) error {
	if err := linkproto.ValidName(c.Node); err != nil {
		return command.Refused("%v", err)
	}
	// Checked before the broker is reached for: a typo is refused at once.
	if err := labels.CheckEdits(c.Edits); err != nil {
		return command.Refused("%v", err)
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	var set labels.Set
	if len(c.Edits) == 0 {
		if err := cl.MustKnow(e.ctx, c.Node); err != nil {
			return command.Refused("%v", err)
		}
		all, err := cl.Labels(e.ctx)
		if err != nil {
			return err
		}
		set = all[c.Node]
	} else if set, err = cl.Label(e.ctx, c.Node, cl.Operator, c.Edits); err != nil {
		if errors.Is(err, client.ErrUnknownNode) {
			return command.Refused("%v", err)
		}
		return err
	}
	fmt.Fprintf(e.stdout, "%s\t%s\n", c.Node, set)
	return nil
}

type journalCmd struct {
	Node  string `arg:"" name:"NODE" help:"The node whose journal to show."`
	Why   string `name:"why" placeholder:"ID" help:"Why is this resource as it is: walk the causes back from its latest record to the declaration or drift behind it."`
	JSON  bool   `name:"json" help:"Print JSON lines, one record each."`
	Since uint64 `name:"since" placeholder:"SEQ" help:"Start at this journal sequence number."`
	// As mesh-host journal's, so that one habit serves both ends.
	Kind     []string `name:"kind" placeholder:"KIND" help:"Only records of this kind (repeatable)."`
	Resource string   `name:"resource" placeholder:"ID" help:"Only records about this resource (file:/etc/motd)."`
}

func (c *journalCmd) Run(e *env) error {
	if c.Why != "" && (c.Since != 0 || len(c.Kind) > 0 || c.Resource != "") {
		return command.Refused("--why takes no other filter")
	}
	if err := linkproto.ValidName(c.Node); err != nil {
		return command.Refused("%v", err)
	}
	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	// A node removed from the mesh keeps its history here, so a node is
	// unknown only when the stream holds nothing of it either.
	if err := cl.MustKnow(e.ctx, c.Node); errors.Is(err, client.ErrUnknownNode) {
		if has, herr := cl.HasRecords(e.ctx, c.Node); herr != nil || !has {
			return failed("%v", err)
		}
	} else if err != nil {
		return err
	}
	if c.Why != "" {
		return fleetview.PrintWhy(e.ctx, e.stdout, cl, c.Node, c.Why, c.JSON)
	}
	for _, k := range c.Kind {
		if !event.Known(event.Kind(k)) {
			fmt.Fprintf(e.stderr, "meshctl: note: kind %q is not one this version knows; showing any records of it\n", k)
		}
	}
	return fleetview.PrintJournalOf(e.ctx, e.stdout, cl, c.Node, c.Since, fleetview.JournalFilter{Kinds: c.Kind, Resource: c.Resource}, c.JSON)
}

// nodeCmd groups what is done to a node as a whole.
type nodeCmd struct {
	Rm nodeRmCmd `cmd:"" help:"Take a node out of the mesh: revoke its key, delete its credential, desired state and reports; its journal stays in the events stream."`
}

type nodeRmCmd struct {
	Node string `arg:"" name:"NODE" help:"The node to remove."`
}

func (c *nodeRmCmd) Run(e *env) error {
	if err := linkproto.ValidName(c.Node); err != nil {
		return command.Refused("%v", err)
	}
	return e.withAccounts(func(cl *client.Client, acc *nodeservice.Accounts) error {
		rm, err := cl.Remove(e.ctx, c.Node, acc)
		if errors.Is(err, client.ErrUnknownNode) {
			return command.Refused("%v", err)
		}
		if err != nil {
			return err
		}
		if rm.Revoked != "" {
			fmt.Fprintf(e.stdout, "revoked %s's key %s: the broker refuses it\n", c.Node, rm.Revoked)
		}
		fmt.Fprintf(e.stdout, "removed %s from mesh %s: credential %s, desired state %s, %d reports purged; its journal stays (`meshctl journal %s`)\n",
			c.Node, cl.Mesh, yesNo(rm.Credited, "deleted", "none"), yesNo(rm.Desired, "deleted", "none"), rm.Reports, c.Node)
		return nil
	})
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
