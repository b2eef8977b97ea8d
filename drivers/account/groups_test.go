package account_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/account"
)

// A group's gid is changed only with change_id, and then in the passwd
// line of each user whose primary group it is, as groupmod -g does.
func TestGIDChange(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	groups := account.NewGroups(r, h.options())
	spec := &drivers.GroupSpec{Name: "alice", GID: intp(1600)}
	obs, err := groups.Observe(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !obs.Exists || !slices.Equal(obs.Differs, []string{"gid"}) || !strings.Contains(obs.Note, "change_id") {
		t.Errorf("Observe = %+v, want Differs [gid] and a note naming change_id", obs)
	}
	before := files(t, r)
	if _, err := groups.Apply(t.Context(), spec); !errors.Is(err, account.ErrIDChange) || !strings.Contains(err.Error(), "1000") || !strings.Contains(err.Error(), "1600") {
		t.Errorf("Apply without change_id: %v, want ErrIDChange naming both gids", err)
	}
	if !mapsEqual(files(t, r), before) {
		t.Error("a refused Apply changed the files")
	}
	changed := &drivers.GroupSpec{Name: "alice", GID: intp(1600), ChangeID: true}
	if a := h.apply(t, groups, changed); a != drivers.Updated {
		t.Errorf("Apply with change_id: %s, want updated", a)
	}
	if got := line(t, r, "/etc/group", "alice"); got != "alice:x:1600:" {
		t.Errorf("group line: %q", got)
	}
	if got := field(t, r, "/etc/passwd", "alice", 3); got != "1600" {
		t.Errorf("alice's primary gid: %s, want 1600 with its group", got)
	}
	if note := groups.ApplyNote(changed); !strings.Contains(note, "chown") {
		t.Errorf("ApplyNote = %q, want it to say nothing was chowned", note)
	}
	if n := groups.Numbers(changed); !slices.Equal(n, []drivers.Number{{Kind: "gid", ID: 1600, Name: "alice"}}) {
		t.Errorf("Numbers = %v", n)
	}
	if _, err := groups.Apply(t.Context(), &drivers.GroupSpec{Name: "alice", GID: intp(27), ChangeID: true}); !errors.Is(err, account.ErrIDTaken) || !strings.Contains(err.Error(), "sudo") {
		t.Errorf("Apply to sudo's gid: %v, want ErrIDTaken naming sudo", err)
	}
	if _, err := groups.Apply(t.Context(), &drivers.GroupSpec{Name: "new", GID: intp(27)}); !errors.Is(err, account.ErrIDTaken) {
		t.Errorf("a new group on sudo's gid: %v, want ErrIDTaken", err)
	}
}

// A new group's gid skips gids in use and reserved for other names; a
// system group's comes from below 1000.
func TestGroupAllocation(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	groups := account.NewGroups(r, h.options())
	h.reserve("gid", 1001, "gone")
	h.apply(t, groups, &drivers.GroupSpec{Name: "deploy"})
	h.apply(t, groups, &drivers.GroupSpec{Name: "sysgrp", System: true})
	if got := line(t, r, "/etc/group", "deploy"); got != "deploy:x:1002:" {
		t.Errorf("deploy: %q, want gid 1002", got)
	}
	if got := line(t, r, "/etc/gshadow", "deploy"); got != "deploy:!::" {
		t.Errorf("deploy's gshadow: %q", got)
	}
	if got := line(t, r, "/etc/group", "sysgrp"); got != "sysgrp:x:996:" {
		t.Errorf("sysgrp: %q, want gid 996", got)
	}
}

// Only a group the host created is removed; one it adopted is left.
func TestGroupRemove(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	groups := account.NewGroups(r, h.options())
	h.apply(t, groups, &drivers.GroupSpec{Name: "deploy"})
	h.apply(t, groups, &drivers.GroupSpec{Name: "staff"})
	before := files(t, r)
	if err := groups.Remove(t.Context(), &drivers.GroupSpec{Name: "staff"}); !errors.Is(err, drivers.ErrLeftInPlace) {
		t.Errorf("Remove(adopted staff): %v, want ErrLeftInPlace", err)
	}
	if !mapsEqual(files(t, r), before) {
		t.Error("Remove of an adopted group changed the files")
	}
	if err := groups.Remove(t.Context(), &drivers.GroupSpec{Name: "deploy"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/etc/group", "/etc/gshadow"} {
		if l := line(t, r, p, "deploy"); l != "" {
			t.Errorf("%s still has %q", p, l)
		}
	}
}
