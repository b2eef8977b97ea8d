package account_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/account"
)

// A user made and removed again leaves every line it did not own as it
// was, byte for byte and in order: comments, NIS lines, odd spacing, a
// last line without a newline (which gets one, to append after it).
func TestKeepsLinesNotOwned(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "odd"), newHost()
	users := account.NewUsers(r, h.options())
	before := files(t, r)

	h.apply(t, users, &drivers.UserSpec{Name: "app", Groups: []string{"staff", "devs"}, Comment: "the app"})

	after := files(t, r)
	wants := map[string]string{
		"/etc/passwd":  before["/etc/passwd"] + "\napp:x:1002:1002:the app:/home/app:/bin/sh\n",
		"/etc/shadow":  before["/etc/shadow"] + "\napp:!:" + today + ":0:99999:7:::\n",
		"/etc/group":   strings.Replace(strings.Replace(before["/etc/group"], "staff:x:50:\n", "staff:x:50:app\n", 1), "devs:x:1500:bob,alice\n", "devs:x:1500:bob,alice,app\n", 1) + "\napp:x:1002:\n",
		"/etc/gshadow": strings.Replace(strings.Replace(before["/etc/gshadow"], "staff:*::\n", "staff:*::app\n", 1), "devs:!:bob:bob,alice\n", "devs:!:bob:bob,alice,app\n", 1) + "\napp:!::\n",
	}
	for p, want := range wants {
		if after[p] != want {
			t.Errorf("%s after Apply:\n got: %q\nwant: %q", p, after[p], want)
		}
	}

	h.apply(t, users, &drivers.UserSpec{Name: "app", Groups: []string{"devs"}, Shell: "/bin/bash"})
	if got, want := read(t, r, "/etc/group"), wants["/etc/group"]; got != strings.Replace(want, "staff:x:50:app\n", "staff:x:50:\n", 1) {
		t.Errorf("group after leaving staff: got %q", got)
	}
	if got, want := line(t, r, "/etc/passwd", "app"), "app:x:1002:1002:the app:/home/app:/bin/bash"; got != want {
		t.Errorf("passwd line changed in place: got %q, want %q", got, want)
	}

	if err := users.Remove(t.Context(), &drivers.UserSpec{Name: "app"}); err != nil {
		t.Fatal(err)
	}
	for p, was := range before {
		if got, want := read(t, r, p), was+"\n"; got != want {
			t.Errorf("%s after Remove:\n got: %q\nwant: %q (as before, with the newline added)", p, got, want)
		}
	}
}

// Each file keeps its mode and owner; the lock file is made 0600.
func TestKeepsModeAndOwner(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	modes := map[string]uint32{}
	owners := map[string][2]uint32{}
	for _, p := range []string{"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow"} {
		if err := os.Chmod(r.Host(p), os.FileMode(0o600+len(modes))); err != nil {
			t.Fatal(err)
		}
		st, err := r.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		modes[p], owners[p] = st.Mode&0o7777, [2]uint32{st.Uid, st.Gid}
	}
	h.apply(t, account.NewUsers(r, h.options()), &drivers.UserSpec{Name: "app", Groups: []string{"staff"}})
	for p, mode := range modes {
		st, err := r.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != mode || [2]uint32{st.Uid, st.Gid} != owners[p] {
			t.Errorf("%s is %04o %d:%d, want %04o %d:%d as it was", p, st.Mode&0o7777, st.Uid, st.Gid, mode, owners[p][0], owners[p][1])
		}
	}
	if st, err := r.Lstat("/etc/.pwd.lock"); err != nil || st.Mode&0o777 != 0o600 {
		t.Errorf("lock file: %v, mode %04o; want a file 0600", err, st.Mode&0o7777)
	}
}

// A root without shadow files gets them, readable by group shadow when
// there is one, else by root alone.
func TestMakesMissingShadowFiles(t *testing.T) {
	t.Parallel()
	for _, withShadowGroup := range []bool{true, false} {
		if withShadowGroup && os.Geteuid() != 0 {
			t.Log("not root: a new shadow file cannot be given to group shadow here; that case is not tested")
			continue
		}
		r, h := newRoot(t, "debian"), newHost()
		for _, p := range []string{"/etc/shadow", "/etc/gshadow"} {
			if err := os.Remove(r.Host(p)); err != nil {
				t.Fatal(err)
			}
		}
		if !withShadowGroup {
			g := strings.Replace(read(t, r, "/etc/group"), "shadow:x:42:\n", "", 1)
			if err := os.WriteFile(r.Host("/etc/group"), []byte(g), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		h.apply(t, account.NewUsers(r, h.options()), &drivers.UserSpec{Name: "app"})
		want, wantGID := uint32(0o640), uint32(shadowGID)
		if !withShadowGroup {
			want, wantGID = 0o600, uint32(os.Getegid())
		}
		for _, p := range []string{"/etc/shadow", "/etc/gshadow"} {
			st, err := r.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode&0o7777 != want || st.Gid != wantGID {
				t.Errorf("shadow group %v: %s is %04o group %d, want %04o group %d", withShadowGroup, p, st.Mode&0o7777, st.Gid, want, wantGID)
			}
		}
		if got := read(t, r, "/etc/shadow"); got != "app:!:"+today+":0:99999:7:::\n" {
			t.Errorf("new shadow: %q", got)
		}
	}
}

// A new user's uid skips every uid in use and every one reserved for
// another name; it gets back one its own name held; its group takes
// the same id when that is free as a gid.
func TestAllocation(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users := account.NewUsers(r, h.options())
	h.reserve("uid", 1001, "gone")  // a user the host removed
	h.reserve("uid", 1003, "gone2") // another
	h.reserve("gid", 1004, "gone3") // a group

	h.apply(t, users, &drivers.UserSpec{Name: "app"})
	if got := line(t, r, "/etc/passwd", "app"); got != "app:x:1004:1005::/home/app:/bin/sh" {
		t.Errorf("app: got %q, want uid 1004 (after 1000 in use and 1003 reserved) and gid 1005 (1004 is reserved for another group)", got)
	}
	h.reserve("uid", 1002, "bob")
	h.apply(t, users, &drivers.UserSpec{Name: "bob", Group: "users"})
	if got := field(t, r, "/etc/passwd", "bob", 2); got != "1002" {
		t.Errorf("bob: uid %s, want 1002, which bob held before", got)
	}
	h.apply(t, users, &drivers.UserSpec{Name: "carol", Group: "users"})
	if got := field(t, r, "/etc/passwd", "carol", 2); got != "1005" {
		t.Errorf("carol: uid %s, want 1005, after the highest taken", got)
	}
	if numbers := users.Numbers(&drivers.UserSpec{Name: "app"}); !slices.Equal(numbers, []drivers.Number{{Kind: "uid", ID: 1004, Name: "app", Made: true}, {Kind: "gid", ID: 1005, Name: "app", Made: true}}) {
		t.Errorf("Numbers(app) = %v, want its uid and the gid of the group it made, both made", numbers)
	}
	if numbers := users.Numbers(&drivers.UserSpec{Name: "carol"}); !slices.Equal(numbers, []drivers.Number{{Kind: "uid", ID: 1005, Name: "carol", Made: true}}) {
		t.Errorf("Numbers(carol) = %v, want its uid alone: its group is not its own", numbers)
	}
}

// A system user's id is taken downward from 999, as useradd -r does,
// skipping what is in use; it gets no aging and useradd's defaults.
func TestSystemRange(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users := account.NewUsers(r, h.options())
	h.apply(t, users, &drivers.UserSpec{Name: "svc", System: true})
	if got, want := line(t, r, "/etc/passwd", "svc"), "svc:x:999:996::/nonexistent:/usr/sbin/nologin"; got != want {
		t.Errorf("svc: got %q, want %q (gid 999 to 997 are taken)", got, want)
	}
	if got, want := line(t, r, "/etc/shadow", "svc"), "svc:!:"+today+"::::::"; got != want {
		t.Errorf("svc shadow: got %q, want %q", got, want)
	}
	h.reserve("uid", 996, "old")
	h.apply(t, users, &drivers.UserSpec{Name: "svc2", System: true, Group: "nogroup"})
	if got := field(t, r, "/etc/passwd", "svc2", 2); got != "995" {
		t.Errorf("svc2: uid %s, want 995 (999 in use, 998 and 997 too, 996 reserved)", got)
	}
}

// An existing user's uid is changed only with change_id, and then the
// note says files were not chowned.
func TestUIDChange(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users := account.NewUsers(r, h.options())
	spec := &drivers.UserSpec{Name: "alice", UID: intp(1500), Groups: []string{"cdrom", "floppy", "sudo", "audio", "dip", "video", "plugdev", "users"}, Password: secret(aliceHash)}
	obs, err := users.Observe(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(obs.Differs, []string{"uid"}) || !strings.Contains(obs.Note, "change_id: true") {
		t.Errorf("Observe = %+v, want Differs [uid] and a note naming change_id", obs)
	}
	before := files(t, r)
	_, err = users.Apply(t.Context(), spec)
	if !errors.Is(err, account.ErrIDChange) || !strings.Contains(err.Error(), "1000") || !strings.Contains(err.Error(), "1500") || !strings.Contains(err.Error(), "change_id: true") {
		t.Errorf("Apply without change_id: %v, want ErrIDChange naming both ids and change_id: true", err)
	}
	if after := files(t, r); !mapsEqual(after, before) {
		t.Error("a refused Apply changed the files")
	}

	changed := *spec
	changed.ChangeID = true
	if a := h.apply(t, users, &changed); a != drivers.Updated {
		t.Errorf("Apply with change_id: %s, want updated", a)
	}
	if got := field(t, r, "/etc/passwd", "alice", 2); got != "1500" {
		t.Errorf("alice's uid: %s, want 1500", got)
	}
	if note := users.ApplyNote(&changed); !strings.Contains(note, "1000") || !strings.Contains(note, "chown") {
		t.Errorf("ApplyNote = %q, want it to say files owned by 1000 were not chowned", note)
	}
	before = files(t, r)
	changed.UID = intp(0)
	if _, err := users.Apply(t.Context(), &changed); !errors.Is(err, account.ErrIDTaken) || !strings.Contains(err.Error(), "root") {
		t.Errorf("Apply to root's uid: %v, want ErrIDTaken naming root", err)
	}
	if after := files(t, r); !mapsEqual(after, before) {
		t.Error("a refused Apply changed the files")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The password comes from a secret, lands in shadow, and is never in an
// Observation or an error; without one the account is locked.
func TestPassword(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users := account.NewUsers(r, h.options())
	spec := &drivers.UserSpec{Name: "app", Password: secret(otherHash)}
	h.apply(t, users, spec)
	if got := field(t, r, "/etc/shadow", "app", 1); got != otherHash {
		t.Errorf("shadow hash: got %q, want the secret's", got)
	}
	if got := field(t, r, "/etc/passwd", "app", 1); got != "x" {
		t.Errorf("passwd password field: %q, want x", got)
	}
	sum := sha256.Sum256([]byte(otherHash))
	leaks := func(what, s string) {
		t.Helper()
		if strings.Contains(s, otherHash) || strings.Contains(s, hex.EncodeToString(sum[:])) || strings.Contains(s, "NKPGFt") {
			t.Errorf("%s holds the hash or its plain digest: %q", what, s)
		}
	}
	obs, err := users.Observe(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !obs.InSync || !strings.HasPrefix(obs.Seen, "hmac-sha256:") {
		t.Errorf("Observe = %+v, want InSync and a keyed Seen", obs)
	}
	leaks("Seen", obs.Seen)

	// Another hash: the user differs in "password" alone, and Seen moves.
	other := &drivers.UserSpec{Name: "app", Password: secret(aliceHash)}
	obs2, err := users.Observe(t.Context(), other)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(obs2.Differs, []string{"password"}) {
		t.Errorf("Observe(another hash).Differs = %q, want [password]", obs2.Differs)
	}
	leaks("Note", obs2.Note)
	h.apply(t, users, other)
	if got := line(t, r, "/etc/shadow", "app"); got != "app:"+aliceHash+":"+today+":0:99999:7:::" {
		t.Errorf("shadow after a new hash: %q", got)
	}
	obs3, err := users.Observe(t.Context(), other)
	if err != nil {
		t.Fatal(err)
	}
	if obs3.Seen == obs.Seen {
		t.Error("Seen did not change with the hash")
	}

	// A value that is not a hash is refused without being named.
	for _, bad := range []string{"hunter2", "$6$salt$hash:0:99999", "$6$salt$hash\nroot::0:0::/:/bin/sh", "!" + otherHash} {
		_, err := users.Apply(t.Context(), &drivers.UserSpec{Name: "app", Password: secret(bad)})
		if !errors.Is(err, drivers.ErrInvalidSpec) {
			t.Errorf("password %q: %v, want ErrInvalidSpec", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), bad) {
			t.Errorf("the error names the value: %v", err)
		}
	}
	// A secret not opened is refused by name.
	if _, err := users.Observe(t.Context(), &drivers.UserSpec{Name: "app", Password: &drivers.Secret{Name: "sealed"}}); !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), "sealed") {
		t.Errorf("an unopened secret: %v, want ErrInvalidSpec naming it", err)
	}

	// Without a password the account is locked, the hash kept behind
	// "!" as usermod -L keeps it; the last change day stays.
	locked := &drivers.UserSpec{Name: "alice", Groups: []string{"cdrom", "floppy", "sudo", "audio", "dip", "video", "plugdev", "users"}}
	obs4, err := users.Observe(t.Context(), locked)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(obs4.Differs, []string{"password"}) || !strings.HasPrefix(obs4.Seen, "sha256:") {
		t.Errorf("Observe(alice without password) = %+v, want Differs [password] and a plain Seen", obs4)
	}
	h.apply(t, users, locked)
	if got, want := line(t, r, "/etc/shadow", "alice"), "alice:!"+aliceHash+":19600:0:99999:7:::"; got != want {
		t.Errorf("alice locked: got %q, want %q", got, want)
	}
	if a := h.apply(t, users, locked); a != drivers.Unchanged {
		t.Errorf("locking again: %s, want unchanged", a)
	}
	obs5, err := users.Observe(t.Context(), locked)
	if err != nil {
		t.Fatal(err)
	}
	if !obs5.InSync {
		t.Errorf("Observe(alice locked) = %+v, want InSync", obs5)
	}
	// Without a key, Seen must not depend on the hash at all: a plain
	// digest over it would let a guess be tested against the journal.
	r2 := newRoot(t, "debian")
	shadow := strings.Replace(read(t, r, "/etc/shadow"), aliceHash, otherHash, 1)
	if err := os.WriteFile(r2.Host("/etc/shadow"), []byte(shadow), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/etc/passwd", "/etc/group", "/etc/gshadow"} {
		if err := os.WriteFile(r2.Host(p), []byte(read(t, r, p)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	obs6, err := account.NewUsers(r2, h.options()).Observe(t.Context(), locked)
	if err != nil {
		t.Fatal(err)
	}
	if !obs6.InSync || obs6.Seen != obs5.Seen {
		t.Errorf("Seen of alice locked over another hash = %q, want %q: the unkeyed digest must not depend on the hash", obs6.Seen, obs5.Seen)
	}
}

// Supplementary groups are exactly the declared ones, in group and in
// gshadow.
func TestSupplementaryGroups(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users := account.NewUsers(r, h.options())
	spec := &drivers.UserSpec{Name: "alice", Groups: []string{"sudo", "staff"}, Password: secret(aliceHash)}
	obs, err := users.Observe(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(obs.Differs, []string{"groups"}) {
		t.Errorf("Differs = %q, want [groups]", obs.Differs)
	}
	h.apply(t, users, spec)
	for _, p := range []string{"/etc/group", "/etc/gshadow"} {
		var in []string
		for l := range strings.Lines(read(t, r, p)) {
			f := strings.Split(strings.TrimSuffix(l, "\n"), ":")
			if slices.Contains(strings.Split(f[3], ","), "alice") {
				in = append(in, f[0])
			}
		}
		if !slices.Equal(in, []string{"sudo", "staff"}) {
			t.Errorf("%s lists alice in %q, want exactly [sudo staff]", p, in)
		}
	}
	if obs, err := users.Observe(t.Context(), spec); err != nil || !obs.InSync {
		t.Errorf("Observe after Apply = %+v, %v; want InSync", obs, err)
	}

	before := files(t, r)
	_, err = users.Apply(t.Context(), &drivers.UserSpec{Name: "alice", Groups: []string{"sudo", "wheel"}, Password: secret(aliceHash)})
	if !errors.Is(err, account.ErrNoGroup) || !strings.Contains(err.Error(), "wheel") {
		t.Errorf("a group that does not exist: %v, want ErrNoGroup naming wheel", err)
	}
	if !mapsEqual(files(t, r), before) {
		t.Error("a refused Apply changed the files")
	}
	if _, err := users.Apply(t.Context(), &drivers.UserSpec{Name: "new", Group: "wheel"}); !errors.Is(err, account.ErrNoGroup) {
		t.Errorf("a primary group that does not exist: %v, want ErrNoGroup", err)
	}
}

// Removing a user the host created removes its lines, its memberships
// and the group it made, but no group another user still needs.
func TestRemoveCreated(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users := account.NewUsers(r, h.options())
	h.apply(t, users, &drivers.UserSpec{Name: "app", Groups: []string{"sudo"}})
	h.apply(t, users, &drivers.UserSpec{Name: "kept", Groups: []string{"sudo"}})
	h.apply(t, users, &drivers.UserSpec{Name: "other", Group: "kept"}) // kept's group is other's primary
	h.apply(t, users, &drivers.UserSpec{Name: "moved"})
	h.apply(t, users, &drivers.UserSpec{Name: "moved", Group: "users"}) // its own group is no longer its primary

	for _, name := range []string{"app", "kept", "moved"} {
		if err := users.Remove(t.Context(), &drivers.UserSpec{Name: name}); err != nil {
			t.Fatalf("Remove(%s): %v", name, err)
		}
	}
	for _, p := range []string{"/etc/passwd", "/etc/shadow"} {
		for _, name := range []string{"app", "kept"} {
			if l := line(t, r, p, name); l != "" {
				t.Errorf("%s still has %q", p, l)
			}
		}
	}
	for _, p := range []string{"/etc/group", "/etc/gshadow"} {
		for _, name := range []string{"app", "moved"} {
			if l := line(t, r, p, name); l != "" {
				t.Errorf("%s still has the group %s made: %q", p, name, l)
			}
		}
		if l := line(t, r, p, "kept"); l == "" {
			t.Errorf("%s lost kept's group, which is other's primary group", p)
		}
		if l := line(t, r, p, "sudo"); strings.Contains(l, "app") || strings.Contains(l, "kept") {
			t.Errorf("%s: sudo still lists a removed user: %q", p, l)
		}
	}
	// A group that is a remaining user's primary group is not removed.
	h.create(account.CreatedGroup, "kept")
	groups := account.NewGroups(r, h.options())
	if err := groups.Remove(t.Context(), &drivers.GroupSpec{Name: "kept"}); !errors.Is(err, account.ErrPrimaryGroup) || !strings.Contains(err.Error(), "other") {
		t.Errorf("Remove(group kept): %v, want ErrPrimaryGroup naming user other", err)
	}
}

// A user the host did not create is adopted, and left in place when no
// longer declared; so is one made again by someone else since.
func TestAdoptedLeftInPlace(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users := account.NewUsers(r, h.options())
	spec := &drivers.UserSpec{Name: "alice", Shell: "/bin/zsh", Groups: []string{"sudo"}, Password: secret(aliceHash)}
	if a := h.apply(t, users, spec); a != drivers.Updated {
		t.Errorf("adopting alice: %s, want updated", a)
	}
	if got, want := line(t, r, "/etc/passwd", "alice"), "alice:x:1000:1000:Alice Example,,,:/home/alice:/bin/zsh"; got != want {
		t.Errorf("alice: got %q, want %q (undeclared fields as they were)", got, want)
	}
	before := files(t, r)
	err := users.Remove(t.Context(), &drivers.UserSpec{Name: "alice"})
	if !errors.Is(err, drivers.ErrLeftInPlace) {
		t.Errorf("Remove(adopted alice): %v, want ErrLeftInPlace", err)
	}
	if !mapsEqual(files(t, r), before) {
		t.Error("Remove of an adopted user changed the files")
	}

	// Created once, then removed and made again by hand with another
	// uid: not the host's.
	h.apply(t, users, &drivers.UserSpec{Name: "app"})
	if err := os.WriteFile(r.Host("/etc/passwd"), []byte(strings.Replace(read(t, r, "/etc/passwd"), "app:x:1001:", "app:x:1234:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := users.Remove(t.Context(), &drivers.UserSpec{Name: "app"}); !errors.Is(err, drivers.ErrLeftInPlace) || !strings.Contains(err.Error(), "1234") {
		t.Errorf("Remove(app made again): %v, want ErrLeftInPlace naming its uid", err)
	}
	// Removing a user that is not there succeeds.
	if err := users.Remove(t.Context(), &drivers.UserSpec{Name: "nobody-here"}); err != nil {
		t.Errorf("Remove(absent): %v", err)
	}
}

// Root.LookupUser finds a user right after its Apply: a file's owner
// may be a user of the same declaration.
func TestLookupSeesNewUser(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	h.apply(t, account.NewUsers(r, h.options()), &drivers.UserSpec{Name: "app", UID: intp(4000)})
	if uid, err := r.LookupUser("app"); err != nil || uid != 4000 {
		t.Errorf("LookupUser(app) = %d, %v; want 4000", uid, err)
	}
	if gid, err := r.LookupGroup("app"); err != nil || gid != 4000 {
		t.Errorf("LookupGroup(app) = %d, %v; want 4000", gid, err)
	}
}

// Specs the files cannot hold are refused, and nothing is written.
func TestValidation(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users, groups := account.NewUsers(r, h.options()), account.NewGroups(r, h.options())
	before := files(t, r)
	for _, spec := range []drivers.Spec{
		&drivers.UserSpec{Name: "Upper"},
		&drivers.UserSpec{Name: "+nis"},
		&drivers.UserSpec{Name: "1abc"},
		&drivers.UserSpec{Name: strings.Repeat("a", 33)},
		&drivers.UserSpec{Name: "a$b"},
		&drivers.UserSpec{Name: "app", UID: intp(-1)},
		&drivers.UserSpec{Name: "app", UID: intp(65535)},
		&drivers.UserSpec{Name: "app", UID: intp(1 << 31)},
		&drivers.UserSpec{Name: "app", ChangeID: true},
		&drivers.UserSpec{Name: "app", Comment: "a:b"},
		&drivers.UserSpec{Name: "app", Comment: "a\nroot::0:0::/:/bin/sh"},
		&drivers.UserSpec{Name: "app", Home: "home/app"},
		&drivers.UserSpec{Name: "app", Home: "/home/../etc"},
		&drivers.UserSpec{Name: "app", Shell: "/bin/sh:x"},
		&drivers.UserSpec{Name: "app", Group: "Staff"},
		&drivers.UserSpec{Name: "app", Groups: []string{"staff", "staff"}},
		&drivers.UserSpec{Name: "app", Groups: []string{"sta:ff"}},
		&drivers.GroupSpec{Name: "Grp"},
		&drivers.GroupSpec{Name: "grp", GID: intp(65535)},
		&drivers.GroupSpec{Name: "grp", ChangeID: true},
	} {
		d := drivers.Driver(users)
		if spec.Kind() == drivers.KindGroup {
			d = groups
		}
		if _, err := d.Apply(t.Context(), spec); !errors.Is(err, drivers.ErrInvalidSpec) {
			t.Errorf("Apply(%+v): %v, want ErrInvalidSpec", spec, err)
		}
		if _, err := d.Observe(t.Context(), spec); !errors.Is(err, drivers.ErrInvalidSpec) {
			t.Errorf("Observe(%+v): %v, want ErrInvalidSpec", spec, err)
		}
	}
	if !mapsEqual(files(t, r), before) {
		t.Error("refused specs changed the files")
	}
}

// When the top of the range is taken, the first free id from the bottom
// is given, as useradd does; when none is free, Apply says so.
func TestAllocationGaps(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	h.reserve("uid", 59999, "top")
	h.reserve("gid", 59999, "top")
	users := account.NewUsers(r, h.options())
	h.apply(t, users, &drivers.UserSpec{Name: "app"})
	if got := line(t, r, "/etc/passwd", "app"); !strings.HasPrefix(got, "app:x:1001:1001:") {
		t.Errorf("app: %q, want uid and gid 1001, the first free after 59999 is taken", got)
	}

	full := h.options()
	full.Reserved = func(kind string, id int) (string, bool) { return "another", true }
	before := files(t, r)
	_, err := account.NewUsers(r, full).Apply(t.Context(), &drivers.UserSpec{Name: "svc", System: true})
	if !errors.Is(err, account.ErrNoFreeID) || !strings.Contains(err.Error(), "100") || !strings.Contains(err.Error(), "999") {
		t.Errorf("Apply with every id held: %v, want ErrNoFreeID naming the range", err)
	}
	if !mapsEqual(files(t, r), before) {
		t.Error("a refused Apply changed the files")
	}
}
