package account

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// A new user's defaults for what its spec leaves empty: useradd's for a
// user, adduser --system's for a system user.
const (
	homeBase    = "/home"
	userShell   = "/bin/sh"
	systemHome  = "/nonexistent"
	systemShell = "/usr/sbin/nologin"
)

// Users is the driver of kind user.
type Users struct {
	*database
	results results
}

var (
	_ drivers.Driver   = (*Users)(nil)
	_ drivers.Numbered = (*Users)(nil)
	_ drivers.Noter    = (*Users)(nil)
)

// NewUsers returns the user driver for root.
func NewUsers(root *rootfs.Root, opts Options) *Users {
	return &Users{database: newDatabase(root, opts)}
}

// spec checks the context and the spec every call but Remove starts with.
func (u *Users) spec(ctx context.Context, spec drivers.Spec) (*drivers.UserSpec, password, error) {
	s, err := drivers.SpecAs[*drivers.UserSpec](ctx, spec, "user")
	if err != nil {
		return nil, password{}, err
	}
	if err := checkUser(s); err != nil {
		return nil, password{}, fmt.Errorf("user %s: %w", s.Name, err)
	}
	pw, err := passwordOf(s)
	if err != nil {
		return nil, password{}, err
	}
	return s, pw, nil
}

// Observe reports how the user stands against spec, judging only what
// the spec declares (see the package doc). It never reveals the
// password: Differs says "password", Seen is keyed.
func (u *Users) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	s, pw, err := u.spec(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	d, err := readDB(u.root)
	if err != nil {
		return drivers.Observation{}, fmt.Errorf("user %s: %w", s.Name, err)
	}
	obs, err := u.observe(d, s, pw)
	if err != nil {
		return drivers.Observation{}, fmt.Errorf("user %s: %w", s.Name, err)
	}
	return obs, nil
}

func (u *Users) observe(d *db, s *drivers.UserSpec, pw password) (drivers.Observation, error) {
	i, f, err := d.passwd.record(s.Name, passwdFields)
	if err != nil {
		return drivers.Observation{}, err
	}
	if i < 0 {
		return drivers.Observation{Differs: []string{"absent"}}, nil
	}
	uid, err := d.passwd.id(f, 2)
	if err != nil {
		return drivers.Observation{}, err
	}
	si, sf, err := d.shadow.record(s.Name, shadowFields)
	if err != nil {
		return drivers.Observation{}, err
	}
	var differs, notes []string
	if s.UID != nil && *s.UID != uid {
		differs = append(differs, "uid")
		if !s.ChangeID {
			notes = append(notes, fmt.Sprintf("uid is %d, declared %d: apply refuses to change it without change_id: true", uid, *s.UID))
		}
	}
	if s.Group != "" {
		gi, gf, err := d.group.record(s.Group, groupFields)
		if err != nil {
			return drivers.Observation{}, err
		}
		if gi < 0 {
			differs = append(differs, "gid")
			notes = append(notes, fmt.Sprintf("group %s does not exist", s.Group))
		} else if gf[2] != f[3] {
			differs = append(differs, "gid")
		}
	}
	if !groupsHold(d, s.Name, s.Groups) {
		differs = append(differs, "groups")
		for _, g := range s.Groups {
			if d.group.find(g) < 0 {
				notes = append(notes, fmt.Sprintf("group %s does not exist", g))
			}
		}
	}
	for _, c := range []struct {
		name, want, found string
	}{{"home", s.Home, f[5]}, {"shell", s.Shell, f[6]}, {"comment", s.Comment, f[4]}} {
		if c.want != "" && c.want != c.found {
			differs = append(differs, c.name)
		}
	}
	if f[1] != "x" || si < 0 || !pw.holds(sf[1]) {
		differs = append(differs, "password")
	}
	return drivers.Observation{
		Exists:  true,
		InSync:  len(differs) == 0,
		Differs: differs,
		Seen:    seenUser(d, f, sf, pw.key),
		Note:    strings.Join(notes, "; "),
	}, nil
}

// groupsHold reports whether user is a member of exactly the groups
// want, in group and in gshadow, and every group of want exists.
func groupsHold(d *db, user string, want []string) bool {
	for _, g := range want {
		if d.group.find(g) < 0 {
			return false
		}
	}
	for _, t := range []*table{d.group, d.gshadow} {
		for i := range t.lines {
			if !t.local(i) {
				continue
			}
			f := t.fields(i)
			if len(f) != groupFields {
				continue
			}
			if slices.Contains(members(f[3]), user) != slices.Contains(want, f[0]) {
				return false
			}
		}
	}
	return true
}

// setGroups makes user a member of exactly the groups want, in group and
// gshadow: added to each declared group's member list, taken out of
// every other's.
func setGroups(d *db, user string, want []string) error {
	for _, g := range want {
		if d.group.find(g) < 0 {
			return fmt.Errorf("%w: supplementary group %s is not in the root's %s: declare it", ErrNoGroup, g, groupPath)
		}
	}
	for _, t := range []*table{d.group, d.gshadow} {
		for i := range t.lines {
			if !t.local(i) {
				continue
			}
			if f := t.fields(i); len(f) == groupFields {
				t.setMember(i, 3, user, slices.Contains(want, f[0]))
			}
		}
	}
	return nil
}

// memberships lists the groups of the group file that name user.
func memberships(d *db, user string) []string {
	var out []string
	for i := range d.group.lines {
		if !d.group.local(i) {
			continue
		}
		if f := d.group.fields(i); len(f) == groupFields && slices.Contains(members(f[3]), user) {
			out = append(out, f[0])
		}
	}
	return out
}

// seenUser is the digest of the user as found: its passwd line, its
// groups and its shadow line, the hash fields only keyed (see digest).
func seenUser(d *db, f, sf []string, key []byte) string {
	dg := newDigest(key)
	dg.add("name", f[0])
	dg.add("uid", f[2])
	dg.add("gid", f[3])
	dg.add("comment", f[4])
	dg.add("home", f[5])
	dg.add("shell", f[6])
	dg.addHash("passwd", f[1])
	dg.add("groups", strings.Join(memberships(d, f[0]), ","))
	if sf == nil {
		dg.add("shadow", "(none)")
	} else {
		dg.addHash("shadow", sf[1])
		dg.add("aging", strings.Join(sf[2:], ":"))
	}
	return dg.String()
}

// Apply makes the user match spec: created with the defaults the package
// doc gives, or changed in what spec declares. An existing user's uid is
// changed only with change_id (ErrIDChange). A user that already matches
// is reported Unchanged without taking the lock or writing anything.
func (u *Users) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	s, pw, err := u.spec(ctx, spec)
	if err != nil {
		return drivers.Unchanged, err
	}
	e, err := u.change(ctx, func(d *db) (edit, error) { return u.edit(d, s, pw) }, (*db).madeOrder)
	if err != nil {
		return drivers.Unchanged, fmt.Errorf("user %s: %w", s.Name, err)
	}
	u.results.keep(s.Name, e.numbers, e.note)
	return e.action, nil
}

// edit makes d hold the user as spec says; its action is Unchanged when
// d is left as it was.
func (u *Users) edit(d *db, s *drivers.UserSpec, pw password) (edit, error) {
	i, f, err := d.passwd.record(s.Name, passwdFields)
	if err != nil {
		return edit{}, err
	}
	if i < 0 {
		return u.create(d, s, pw)
	}
	return u.update(d, s, pw, i, f)
}

func (u *Users) create(d *db, s *drivers.UserSpec, pw password) (edit, error) {
	uids := d.passwd.ids(2)
	var uid int
	if s.UID != nil {
		if holder, ok := uids[*s.UID]; ok {
			return edit{}, fmt.Errorf("%w: uid %d is user %s's", ErrIDTaken, *s.UID, holder)
		}
		uid = *s.UID
	} else {
		var err error
		if uid, err = u.allocate("uid", s.Name, s.System, uids, -1); err != nil {
			return edit{}, err
		}
	}
	e := edit{action: drivers.Created, numbers: []drivers.Number{{Kind: "uid", ID: uid, Name: s.Name, Made: true}}}
	gid, made, err := u.primaryGroup(d, s, uid)
	if err != nil {
		return edit{}, err
	}
	if made {
		e.numbers = append(e.numbers, drivers.Number{Kind: "gid", ID: gid, Name: s.Name, Made: true})
		e.note = fmt.Sprintf("made group %s (gid %d) as its primary group", s.Name, gid)
	}
	if err := setGroups(d, s.Name, s.Groups); err != nil {
		return edit{}, err
	}
	home, shell := s.Home, s.Shell
	if home == "" {
		home = homeBase + "/" + s.Name
		if s.System {
			home = systemHome
		}
	}
	if shell == "" {
		shell = userShell
		if s.System {
			shell = systemShell
		}
	}
	// A shadow line left by a user removed by hand is replaced whole.
	d.shadow.set(d.shadow.find(s.Name), u.newShadow(s, pw))
	d.passwd.set(-1, []string{s.Name, "x", strconv.Itoa(uid), strconv.Itoa(gid), s.Comment, home, shell})
	return e, nil
}

// newShadow is the shadow line useradd writes for a new user: no aging
// for a system user (useradd -r), Debian's login.defs for another.
func (u *Users) newShadow(s *drivers.UserSpec, pw password) []string {
	hash := lockedHash
	if pw.declared {
		hash = pw.hash
	}
	if s.System {
		return []string{s.Name, hash, u.day(), "", "", "", "", "", ""}
	}
	return []string{s.Name, hash, u.day(), "0", "99999", "7", "", "", ""}
}

// primaryGroup resolves a new user's primary group: the spec's, else the
// group of the user's name, made (made true) when there is none, with
// the user's uid as gid when that is free.
func (u *Users) primaryGroup(d *db, s *drivers.UserSpec, uid int) (gid int, made bool, err error) {
	if s.Group != "" {
		gid, err := groupID(d, s.Group)
		return gid, false, err
	}
	i, f, err := d.group.record(s.Name, groupFields)
	if err != nil {
		return 0, false, err
	}
	if i >= 0 {
		gid, err := d.group.id(f, 2)
		return gid, false, err
	}
	if gid, err = u.allocate("gid", s.Name, s.System, d.group.ids(2), uid); err != nil {
		return 0, false, err
	}
	d.group.set(-1, []string{s.Name, "x", strconv.Itoa(gid), ""})
	if d.gshadow.find(s.Name) < 0 {
		d.gshadow.set(-1, []string{s.Name, lockedHash, "", ""})
	}
	return gid, true, nil
}

// groupID is the gid of the group name.
func groupID(d *db, name string) (int, error) {
	i, f, err := d.group.record(name, groupFields)
	if err != nil {
		return 0, err
	}
	if i < 0 {
		return 0, fmt.Errorf("%w: primary group %s is not in the root's %s: declare it", ErrNoGroup, name, groupPath)
	}
	return d.group.id(f, 2)
}

func (u *Users) update(d *db, s *drivers.UserSpec, pw password, i int, f []string) (edit, error) {
	uid, err := d.passwd.id(f, 2)
	if err != nil {
		return edit{}, err
	}
	e := edit{action: drivers.Updated}
	if s.UID != nil && *s.UID != uid {
		if !s.ChangeID {
			return edit{}, fmt.Errorf("%w: it has uid %d, declared %d; say change_id: true to change it (files owned by uid %d are not chowned)", ErrIDChange, uid, *s.UID, uid)
		}
		if holder, ok := d.passwd.ids(2)[*s.UID]; ok {
			return edit{}, fmt.Errorf("%w: uid %d is user %s's", ErrIDTaken, *s.UID, holder)
		}
		e.note = fmt.Sprintf("uid changed from %d to %d: files owned by uid %d keep it (the host chowns nothing)", uid, *s.UID, uid)
		uid = *s.UID
		f[2] = strconv.Itoa(uid)
	}
	if s.Group != "" {
		gid, err := groupID(d, s.Group)
		if err != nil {
			return edit{}, err
		}
		f[3] = strconv.Itoa(gid)
	}
	for n, v := range map[int]string{4: s.Comment, 5: s.Home, 6: s.Shell} {
		if v != "" {
			f[n] = v
		}
	}
	f[1] = "x" // the hash is in shadow
	d.passwd.set(i, f)
	if err := setGroups(d, s.Name, s.Groups); err != nil {
		return edit{}, err
	}
	si, sf, err := d.shadow.record(s.Name, shadowFields)
	switch {
	case err != nil:
		return edit{}, err
	case si < 0:
		d.shadow.set(-1, u.newShadow(s, pw))
	case !pw.holds(sf[1]):
		sf[1] = pw.field(sf[1])
		if pw.declared {
			sf[2] = u.day() // as usermod -p: the password changed today
		}
		d.shadow.set(si, sf)
	}
	e.numbers = []drivers.Number{{Kind: "uid", ID: uid, Name: s.Name}}
	if gid, ok := u.ownGroup(d, s.Name); ok {
		e.numbers = append(e.numbers, drivers.Number{Kind: "gid", ID: gid, Name: s.Name})
	}
	if !d.changed() {
		e.action = drivers.Unchanged
	}
	return e, nil
}

// ownGroup is the gid of the group user made for itself
// (Options.Created), while that group is still the one made: the gid it
// has is one the host gave it (Options.Reserved).
func (u *Users) ownGroup(d *db, user string) (int, bool) {
	i, f, err := d.group.record(user, groupFields)
	if err != nil || i < 0 || !u.created(CreatedUserGroup, user) {
		return 0, false
	}
	gid, err := d.group.id(f, 2)
	if err != nil || !u.madeHere("gid", gid, user) {
		return 0, false
	}
	return gid, true
}

// Remove removes the user if the host created it (Options.Created) with
// the uid it has (Options.Reserved): its passwd and shadow lines, its
// name from every group's member and administrator lists, and the group
// it made for itself when no one else uses it. Never its home. A user
// the host did not make is left in place (drivers.ErrLeftInPlace).
func (u *Users) Remove(ctx context.Context, spec drivers.Spec) error {
	s, err := drivers.SpecAs[*drivers.UserSpec](ctx, spec, "user")
	if err != nil {
		return err
	}
	if err := checkName("user", s.Name); err != nil {
		return err
	}
	if _, err := u.change(ctx, func(d *db) (edit, error) { return u.remove(d, s.Name) }, (*db).removedOrder); err != nil {
		return fmt.Errorf("user %s: %w", s.Name, err)
	}
	return nil
}

func (u *Users) remove(d *db, name string) (edit, error) {
	i, f, err := d.passwd.record(name, passwdFields)
	if err != nil || i < 0 {
		return edit{}, err
	}
	uid, err := d.passwd.id(f, 2)
	if err != nil {
		return edit{}, err
	}
	switch {
	case !u.created(CreatedUser, name):
		return edit{}, fmt.Errorf("the host did not create it (it was there before), so it stays: %w", drivers.ErrLeftInPlace)
	case !u.madeHere("uid", uid, name):
		return edit{}, fmt.Errorf("its uid %d is not one the host gave it (someone made it again since), so it stays: %w", uid, drivers.ErrLeftInPlace)
	}
	own, hasOwn := u.ownGroup(d, name)
	d.passwd.remove(i)
	if si := d.shadow.find(name); si >= 0 {
		d.shadow.remove(si)
	}
	for t, fields := range map[*table][]int{d.group: {3}, d.gshadow: {2, 3}} {
		for i := range t.lines {
			if !t.local(i) || len(t.fields(i)) != groupFields {
				continue
			}
			for _, n := range fields {
				t.setMember(i, n, name, false)
			}
		}
	}
	if hasOwn && unused(d, name, own) {
		d.group.remove(d.group.find(name))
		if gi := d.gshadow.find(name); gi >= 0 {
			d.gshadow.remove(gi)
		}
	}
	return edit{action: drivers.Updated}, nil
}

// unused reports whether the group name (gid) has no members, in group
// or gshadow, and is no user's primary group.
func unused(d *db, name string, gid int) bool {
	for _, t := range []*table{d.group, d.gshadow} {
		if i, f, err := t.record(name, groupFields); err != nil || (i >= 0 && f[3] != "") {
			return false
		}
	}
	_, primary := d.passwd.ids(3)[gid]
	return !primary
}

// Numbers returns the ids the user's last successful Apply found it
// holding: its uid, and the gid of the group it made for itself.
func (u *Users) Numbers(spec drivers.Spec) []drivers.Number {
	s, ok := spec.(*drivers.UserSpec)
	if !ok || s == nil {
		return nil
	}
	n, _ := u.results.get(s.Name)
	return n
}

// ApplyNote says what the user's last Apply did beyond the spec's
// fields: a group it made, a uid it changed (and did not chown).
func (u *Users) ApplyNote(spec drivers.Spec) string {
	s, ok := spec.(*drivers.UserSpec)
	if !ok || s == nil {
		return ""
	}
	_, note := u.results.get(s.Name)
	return note
}
