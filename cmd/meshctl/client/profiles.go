package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/profile"
)

// Profiles returns the mesh's profiles, sorted by name, removed ones left
// out.
func (c *Client) Profiles(ctx context.Context) ([]store.ProfileRecord, error) {
	ps, err := c.store.Profiles(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	var out []store.ProfileRecord
	err = decodeEach(func(put func(jetstream.KeyValueEntry)) error { return ps.Each(ctx, put) }, ps.Decode, func(rec store.ProfileRecord) {
		if !rec.Removed {
			out = append(out, rec)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list the profiles: %w", err)
	}
	slices.SortFunc(out, func(a, b store.ProfileRecord) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Profile returns the profile called name.
func (c *Client) Profile(ctx context.Context, name string) (*store.ProfileRecord, error) {
	hist, err := c.ProfileHistory(ctx, name)
	if err != nil {
		return nil, err
	}
	last := hist[len(hist)-1]
	if last.Removed {
		return nil, fmt.Errorf("%w: profile %s was removed by %s at %s", ErrRefused, name, last.Operator, last.At.Format(time.RFC3339))
	}
	return &last, nil
}

// ProfileHistory returns every change of the profile called name the
// bucket keeps, oldest first.
func (c *Client) ProfileHistory(ctx context.Context, name string) ([]store.ProfileRecord, error) {
	if err := profile.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	ps, err := c.store.Profiles(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	out, err := ps.History(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: there is no profile %s (see `meshctl profile list`)", ErrRefused, name)
	}
	if err != nil {
		return nil, fmt.Errorf("the history of profile %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: there is no profile %s", ErrRefused, name)
	}
	return out, nil
}

// SetProfile stores p, new or changed, after checking it: it must parse,
// and render for every node it would select, together with the other
// profiles, so a change that breaks a node's declaration is refused
// before any node could get it. It returns the nodes it selects. Nothing
// is pushed: a rollout does that.
func (c *Client) SetProfile(ctx context.Context, p profile.Profile, operator string) (selected []string, err error) {
	parsed, err := profile.Parse(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	rec := store.ProfileRecord{Profile: p, Operator: operator, At: c.Now().UTC()}
	value := mustJSON(rec)
	if len(value) > store.MaxProfileRecord {
		return nil, fmt.Errorf("%w: profile %s is %d bytes stored; at most %d", ErrRefused, p.Name, len(value), store.MaxProfileRecord)
	}
	fleet, err := c.loadFleet(ctx)
	if err != nil {
		return nil, err
	}
	fleet.replace(parsed)
	nodes, err := fleet.nodes()
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, node := range nodes {
		if !parsed.Selects(fleet.labels[node]) {
			continue
		}
		selected = append(selected, node)
		if _, _, err := profile.Render(fleet.node(node), fleet.profiles, 1); err != nil {
			problems = append(problems, fmt.Sprintf("for node %s:\n%v", node, indent(err.Error())))
		}
	}
	if len(problems) > 0 {
		const most = 5
		more := ""
		if len(problems) > most {
			more = fmt.Sprintf("\n(and %s more)", plural(len(problems)-most, "node"))
			problems = problems[:most]
		}
		return selected, fmt.Errorf("%w: profile %s does not render:\n%s%s", ErrRefused, p.Name, strings.Join(problems, "\n"), more)
	}

	ps, err := c.store.Profiles(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	rev, err := ps.Revision(ctx, p.Name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read profile %s: %w", p.Name, err)
	case rev != 0 && fleet.revisions[p.Name] != 0 && fleet.revisions[p.Name] != rev:
		err = jetstream.ErrKeyRevisionMismatch
	default:
		err = ps.Put(ctx, rec, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil, fmt.Errorf("%w: profile %s was changed by someone else meanwhile; look, then set it again", ErrRefused, p.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("store profile %s: %w", p.Name, err)
	}
	return selected, nil
}

// RemoveProfile removes the profile called name: a record saying who
// removed it, so its history keeps that. Nothing is pushed; the nodes it
// selected keep what they have until a rollout renders them without it.
func (c *Client) RemoveProfile(ctx context.Context, name, operator string) error {
	cur, err := c.Profile(ctx, name)
	if err != nil {
		return err
	}
	ps, err := c.store.Profiles(ctx, c.Mesh)
	if err != nil {
		return err
	}
	rec := store.ProfileRecord{Profile: profile.Profile{Name: name}, Operator: operator, At: c.Now().UTC(), Removed: true}
	if err := ps.Put(ctx, rec, cur.Revision); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("%w: profile %s was changed by someone else meanwhile; look, then remove it again", ErrRefused, name)
		}
		return fmt.Errorf("remove profile %s: %w", name, err)
	}
	return nil
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
