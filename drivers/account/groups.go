package account

import (
	"context"
	"fmt"
	"strconv"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Groups is the driver of kind group. A group's members are not its
// own: each user resource holds its own memberships (UserSpec.Groups).
type Groups struct {
	*database
	results results
}

var (
	_ drivers.Driver   = (*Groups)(nil)
	_ drivers.Numbered = (*Groups)(nil)
	_ drivers.Noter    = (*Groups)(nil)
)

// NewGroups returns the group driver for root.
func NewGroups(root *rootfs.Root, opts Options) *Groups {
	return &Groups{database: newDatabase(root, opts)}
}

func (g *Groups) spec(ctx context.Context, spec drivers.Spec) (*drivers.GroupSpec, error) {
	s, err := drivers.SpecAs[*drivers.GroupSpec](ctx, spec, "group")
	if err != nil {
		return nil, err
	}
	if err := checkGroup(s); err != nil {
		return nil, fmt.Errorf("group %s: %w", s.Name, err)
	}
	return s, nil
}

// Observe reports how the group stands against spec: its gid, when the
// spec declares one.
func (g *Groups) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	s, err := g.spec(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	d, err := readDB(g.root)
	if err != nil {
		return drivers.Observation{}, fmt.Errorf("group %s: %w", s.Name, err)
	}
	i, f, err := d.group.record(s.Name, groupFields)
	if err != nil {
		return drivers.Observation{}, fmt.Errorf("group %s: %w", s.Name, err)
	}
	if i < 0 {
		return drivers.Observation{Differs: []string{"absent"}}, nil
	}
	obs := drivers.Observation{Exists: true, InSync: true, Seen: seenGroup(d, f)}
	if s.GID != nil && strconv.Itoa(*s.GID) != f[2] {
		obs.InSync, obs.Differs = false, []string{"gid"}
		if !s.ChangeID {
			obs.Note = fmt.Sprintf("gid is %s, declared %d: apply refuses to change it without change_id: true", f[2], *s.GID)
		}
	}
	return obs, nil
}

// seenGroup is the digest of the group as found: its group line and its
// gshadow line, whose password is told only as locked, empty or set.
func seenGroup(d *db, f []string) string {
	dg := newDigest(nil)
	dg.add("name", f[0])
	dg.add("gid", f[2])
	dg.add("members", f[3])
	dg.addHash("group", f[1])
	if i, gf, err := d.gshadow.record(f[0], groupFields); err != nil || i < 0 {
		dg.add("gshadow", "(none)")
	} else {
		dg.addHash("gshadow", gf[1])
		dg.add("administrators", gf[2])
		dg.add("gshadow members", gf[3])
	}
	return dg.String()
}

// Apply makes the group match spec: created with its gid (or one
// allocated), or its gid changed when the spec says change_id (and then
// in the passwd line of every user whose primary group it is).
func (g *Groups) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	s, err := g.spec(ctx, spec)
	if err != nil {
		return drivers.Unchanged, err
	}
	e, err := g.change(ctx, func(d *db) (edit, error) { return g.edit(d, s) }, (*db).madeOrder)
	if err != nil {
		return drivers.Unchanged, fmt.Errorf("group %s: %w", s.Name, err)
	}
	g.results.keep(s.Name, e.numbers, e.note)
	return e.action, nil
}

func (g *Groups) edit(d *db, s *drivers.GroupSpec) (edit, error) {
	i, f, err := d.group.record(s.Name, groupFields)
	if err != nil {
		return edit{}, err
	}
	gids := d.group.ids(2)
	taken := func(gid int) error {
		if holder, ok := gids[gid]; ok && holder != s.Name {
			return fmt.Errorf("%w: gid %d is group %s's", ErrIDTaken, gid, holder)
		}
		return nil
	}
	if i < 0 {
		var gid int
		if s.GID != nil {
			if err := taken(*s.GID); err != nil {
				return edit{}, err
			}
			gid = *s.GID
		} else if gid, err = g.allocate("gid", s.Name, s.System, gids, -1); err != nil {
			return edit{}, err
		}
		d.group.set(-1, []string{s.Name, "x", strconv.Itoa(gid), ""})
		if d.gshadow.find(s.Name) < 0 {
			d.gshadow.set(-1, []string{s.Name, lockedHash, "", ""})
		}
		return edit{action: drivers.Created, numbers: []drivers.Number{{Kind: "gid", ID: gid, Name: s.Name, Made: true}}}, nil
	}
	gid, err := d.group.id(f, 2)
	if err != nil {
		return edit{}, err
	}
	e := edit{action: drivers.Unchanged}
	if s.GID != nil && *s.GID != gid {
		if !s.ChangeID {
			return edit{}, fmt.Errorf("%w: it has gid %d, declared %d; say change_id: true to change it (files of group %d are not chowned)", ErrIDChange, gid, *s.GID, gid)
		}
		if err := taken(*s.GID); err != nil {
			return edit{}, err
		}
		f[2] = strconv.Itoa(*s.GID)
		d.group.set(i, f)
		// As groupmod -g: the group's users keep it as their primary
		// group.
		for j := range d.passwd.lines {
			if !d.passwd.local(j) {
				continue
			}
			if pf := d.passwd.fields(j); len(pf) == passwdFields && pf[3] == strconv.Itoa(gid) {
				pf[3] = f[2]
				d.passwd.set(j, pf)
			}
		}
		e = edit{action: drivers.Updated, note: fmt.Sprintf("gid changed from %d to %d: files of group %d keep it (the host chowns nothing)", gid, *s.GID, gid)}
		gid = *s.GID
	}
	e.numbers = []drivers.Number{{Kind: "gid", ID: gid, Name: s.Name}}
	return e, nil
}

// Remove removes the group if the host created it (Options.Created) with
// the gid it has (Options.Reserved): its group and gshadow lines. A group
// the host did not make is left in place (drivers.ErrLeftInPlace); one
// that is a user's primary group is not removed (ErrPrimaryGroup).
func (g *Groups) Remove(ctx context.Context, spec drivers.Spec) error {
	s, err := drivers.SpecAs[*drivers.GroupSpec](ctx, spec, "group")
	if err != nil {
		return err
	}
	if err := checkName("group", s.Name); err != nil {
		return err
	}
	if _, err := g.change(ctx, func(d *db) (edit, error) { return g.remove(d, s.Name) }, (*db).removedOrder); err != nil {
		return fmt.Errorf("group %s: %w", s.Name, err)
	}
	return nil
}

func (g *Groups) remove(d *db, name string) (edit, error) {
	i, f, err := d.group.record(name, groupFields)
	if err != nil || i < 0 {
		return edit{}, err
	}
	gid, err := d.group.id(f, 2)
	if err != nil {
		return edit{}, err
	}
	switch {
	case !g.created(CreatedGroup, name):
		return edit{}, fmt.Errorf("the host did not create it (it was there before), so it stays: %w", drivers.ErrLeftInPlace)
	case !g.madeHere("gid", gid, name):
		return edit{}, fmt.Errorf("its gid %d is not one the host gave it (someone made it again since), so it stays: %w", gid, drivers.ErrLeftInPlace)
	}
	if user, ok := d.passwd.ids(3)[gid]; ok {
		return edit{}, fmt.Errorf("%w: it is the primary group of user %s; remove the user or give it another group first", ErrPrimaryGroup, user)
	}
	d.group.remove(i)
	if gi := d.gshadow.find(name); gi >= 0 {
		d.gshadow.remove(gi)
	}
	return edit{action: drivers.Updated}, nil
}

// Numbers returns the gid the group's last successful Apply found it
// holding.
func (g *Groups) Numbers(spec drivers.Spec) []drivers.Number {
	s, ok := spec.(*drivers.GroupSpec)
	if !ok || s == nil {
		return nil
	}
	n, _ := g.results.get(s.Name)
	return n
}

// ApplyNote says what the group's last Apply did beyond its spec: a gid
// it changed (and did not chown).
func (g *Groups) ApplyNote(spec drivers.Spec) string {
	s, ok := spec.(*drivers.GroupSpec)
	if !ok || s == nil {
		return ""
	}
	_, note := g.results.get(s.Name)
	return note
}
