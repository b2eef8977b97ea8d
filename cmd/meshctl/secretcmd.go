package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/sealing"
)

type secretCmd struct {
	Set  secretSetCmd  `cmd:"" help:"Store a secret's value: from standard input, or --from-file. It never goes on the command line."`
	List secretListCmd `cmd:"" help:"List the secrets' names (never their values)."`
	Rm   secretRmCmd   `cmd:"" help:"Remove a secret. Nodes keep what was sealed to them until declared without it."`
}

type secretSetCmd struct {
	Name     string `arg:"" name:"NAME" help:"The secret's name, as declarations name it."`
	FromFile string `name:"from-file" type:"existingfile" placeholder:"FILE" help:"Read the value from FILE instead of standard input."`
}

func (c *secretSetCmd) Run(e *env) error {
	store, err := e.secrets()
	if err != nil {
		return err
	}
	in := io.Reader(os.Stdin)
	what := "standard input"
	if c.FromFile != "" {
		f, err := os.Open(c.FromFile)
		if err != nil {
			return failed("%v", err)
		}
		defer f.Close()
		in, what = f, c.FromFile
	}
	value, err := io.ReadAll(io.LimitReader(in, sealing.MaxValue+1))
	if err != nil {
		return failed("read the value from %s: %v", what, err)
	}
	if err := store.Set(c.Name, value); err != nil {
		return command.Refused("%v", err)
	}
	// Neither the value nor a digest of it: the name and the size only.
	fmt.Fprintf(e.stdout, "secret %s stored (%d bytes, sealed); declarations naming it get it when next declared\n", c.Name, len(value))
	return nil
}

// secrets is the authority's secret store.
func (e *env) secrets() (*authority.Secrets, error) {
	a, err := e.authority()
	if err != nil {
		return nil, err
	}
	return a.Secrets()
}

type secretListCmd struct{}

func (secretListCmd) Run(e *env) error {
	store, err := e.secrets()
	if err != nil {
		return err
	}
	names, err := store.List()
	if err != nil {
		return failed("%v", err)
	}
	for _, n := range names {
		fmt.Fprintln(e.stdout, n)
	}
	return nil
}

type secretRmCmd struct {
	Name string `arg:"" name:"NAME" help:"The secret's name."`
}

func (c *secretRmCmd) Run(e *env) error {
	store, err := e.secrets()
	if err != nil {
		return err
	}
	if err := store.Remove(c.Name); err != nil {
		return command.Refused("%v", err)
	}
	fmt.Fprintf(e.stdout, "secret %s removed\n", c.Name)
	return nil
}
