package fleetview

import (
	"context"
	"io"
	"slices"

	"github.com/mesh-host/mesh-host/cmd/internal/journalview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/journal/event"
)

// Journal is what the journal printers read a node's records from.
type Journal interface {
	// Records hands fn node's records from sequence from on, in order.
	Records(ctx context.Context, node string, from uint64, fn func(event.Record) error) error
	// Why is what `journal --why` shows of node's resource: the cause
	// chain behind its latest record, the declaration that holds a
	// repaired resource, the one that dropped it.
	Why(ctx context.Context, node, resource string) (journalview.Why, error)
}

var _ Journal = (*client.Client)(nil)

// PrintJournal prints node's records from sequence from on with the same
// printer as `mesh-host journal`: a table, or JSON lines when asJSON.
func PrintJournal(ctx context.Context, w io.Writer, j Journal, node string, from uint64, asJSON bool) error {
	return PrintJournalOf(ctx, w, j, node, from, JournalFilter{}, asJSON)
}

// JournalFilter narrows a journal's listing as `mesh-host journal`'s
// --kind and --resource do; its zero value keeps every record.
type JournalFilter struct {
	// Kinds keeps the records of these kinds; any kind when empty.
	Kinds []string
	// Resource keeps the records about this resource; any when "".
	Resource string
}

// Keep reports whether f keeps r.
func (f JournalFilter) Keep(r event.Record) bool {
	return (len(f.Kinds) == 0 || slices.Contains(f.Kinds, string(r.Kind))) &&
		(f.Resource == "" || r.Resource == f.Resource)
}

// PrintJournalOf is PrintJournal of the records f keeps, in the table and
// as JSON lines alike.
func PrintJournalOf(ctx context.Context, w io.Writer, j Journal, node string, from uint64, f JournalFilter, asJSON bool) error {
	out := journalview.NewPrinter(w, asJSON)
	err := j.Records(ctx, node, from, func(r event.Record) error {
		if !f.Keep(r) {
			return nil
		}
		return out.Print(r)
	})
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	return err
}

// PrintWhy prints the chain behind node's resource as `mesh-host journal
// --why` does.
func PrintWhy(ctx context.Context, w io.Writer, j Journal, node, resource string, asJSON bool) error {
	why, err := j.Why(ctx, node, resource)
	if err != nil {
		return err
	}
	return journalview.PrintWhy(w, resource, why, asJSON, "the events stream does not hold")
}
