// Package account is the driver of two kinds, user and group: accounts in
// the root's own /etc/passwd, /etc/shadow, /etc/group and /etc/gshadow,
// which the host edits itself.
//
// It does not run useradd, usermod or groupadd: the root may be a sandbox
// directory rather than the machine's "/", and the tools' way into one is
// uneven: --root chroots, so it needs the tools' libraries and NSS modules
// inside the root, and --prefix skips parts of what the tools do, both
// differently from one shadow-utils version or distribution to the next.
// The driver does to the four files what shadow-utils does, and no more:
//
//   - Beneath the root, through rootfs.Root: a symlink at any of the
//     files, or at /etc, is refused (drivers.ErrUnsafePath), never followed.
//   - Under the shadow-utils lock: /etc/.pwd.lock beneath the root, locked
//     for writing with fcntl(2) as lckpwdf(3) locks it, and held from the
//     read of the four files to the last write, so that a useradd, vipw or
//     passwd on the machine waits for the host and the host for it. The
//     wait is bounded (Options.LockTimeout, 15 s by default, as lckpwdf's);
//     past it Apply fails with ErrLocked, naming the lock. See lockFile
//     for why one lock is enough within the host too.
//   - Atomically: each file is written whole beside itself and renamed over
//     it (rootfs.Root.WriteFile), durable before Apply returns, with the
//     mode and owner the file had. A file that is missing is made, owned
//     by the host (root, on a node): passwd and group 0644, shadow and
//     gshadow 0640 and of group shadow when the root has that group (as
//     Debian has them), else 0600.
//   - Line by line: every line the driver does not own (comments, NIS "+"
//     and "-" lines, odd spacing, other accounts) is kept byte for byte and
//     in its place. A line it changes is changed where it is, a new one is
//     appended; a last line without a newline gets one when a line is
//     appended after it.
//
// # Write order
//
// The four renames are four steps, and a host killed between two of them
// leaves the files it did not reach as they were. They are ordered so that
// what is left is a machine a login can stand on: when a user is made or
// changed, gshadow, group and shadow are written before passwd, so a user
// appears in passwd (where every lookup starts) only once its group, its
// memberships and its shadow line are there; when a user is removed,
// passwd goes first, so it disappears before what it stood on. Groups
// likewise: gshadow before group when one is made, group before gshadow
// when one is removed. A step left undone is finished by the next
// reconcile, which finds the resource out of sync.
//
// # Users
//
// A new user gets, for what its spec leaves empty: a uid allocated as
// useradd allocates one (see allocate), counting every id in use in the
// root's files and every id Options.Reserved says another name held; the
// group of its name as primary group, made beside it (with a gid equal to
// its uid when that is free) unless a group of that name exists, which it
// then joins (so a group declared as a resource of its own, applied
// before users, is that resource's: the user never removes it); home
// /home/NAME, shell /bin/sh, as useradd gives them, or
// for a system user home /nonexistent and shell /usr/sbin/nologin, as
// adduser --system does; no comment; and a shadow line as useradd writes
// one: the password locked ("!") unless the spec gives one, the last
// change today (Options.Now), then 0:99999:7 as Debian's login.defs says
// for a user, and no aging at all for a system user.
//
// An existing user is judged only in what its spec declares: a uid, a
// primary group, a home, a shell or a comment the spec leaves empty is
// left as it is (so a comment cannot be emptied by declaring none). Two
// things are always held: its supplementary groups are exactly the
// spec's Groups (the user is added to the member list of each declared
// group, in group and gshadow, and taken out of every other group's;
// none declared means none), and its password: the spec's hash, or,
// without one, a locked account, which for an account that has a
// password is that password with "!" before it, as usermod -L locks it,
// so that it can be unlocked as it was. Setting a hash sets the last
// change day to today, as usermod -p does; every other shadow field of
// an existing line is kept.
//
// A group is judged by its gid alone, when its spec declares one: its
// members are the users', each held by its own resource.
//
// A uid is never changed silently: an existing user whose uid differs
// from the spec's is refused (ErrIDChange) unless the spec says
// change_id: true, and then only its passwd line changes: files owned by
// the old uid keep it (ApplyNote says so). A group's gid likewise; a
// changed gid is also changed in the passwd line of every user whose
// primary group it was, as groupmod -g does.
//
// The password is a crypt(3) hash given as a secret (drivers.Secret). It
// is never in an error, a note or an Observation: Differs says
// "password", and Seen is an HMAC-SHA256 keyed with the secret's digest
// key over what was found, or, without a declared password, a SHA-256
// over the account with the hash replaced by whether it is locked or set.
//
// # Removal
//
// Remove gets only the name (drivers.SpecForRemoval), so the host tells
// the driver what it made (Options.Created). An account the host did not
// create, one it adopted because it was there before, is left in place
// (drivers.ErrLeftInPlace), and so is one whose id is not one the host
// gave its name (Options.Reserved): someone made it again since. Removing a user removes its passwd and shadow
// lines, its name from every member list of group and gshadow (and
// gshadow's administrator lists), and the group the user made for itself
// when no one else is in it or has it as primary group; never its home
// or anything else on disk. A group that is still some user's primary
// group is not removed (ErrPrimaryGroup).
//
// # What it does not do
//
// It reads no /etc/login.defs or /etc/default/useradd: the id ranges and
// the aging of a new shadow line are Debian's defaults. It takes
// shadow-utils' per-file locks (/etc/passwd.lock and the like) no more
// than systemd-sysusers does: every shadow-utils tool takes the lckpwdf
// lock first, and that is the one that excludes, except a tool run with
// --prefix, which takes only the per-file locks, and which the host does
// not wait for. A file it writes is a
// new inode with the old one's mode and owner, but not its extended
// attributes (an SELinux label, an ACL). It tells no cache (nscd, sssd)
// that the files changed, and makes, moves or removes no home directory
// and no mail spool.
//
// # Within the host
//
// Users and Groups share nothing but the lock file: any number of Apply
// and Remove calls may run at once, from one driver or both, and the
// lock makes their edits of the four files one after the other, so none
// is lost. Observe, and an Apply or Remove that finds nothing to change,
// read the files without the lock: every writer renames whole files into
// place, so a reader sees each file before a change or after it.
// Root.LookupUser and Root.LookupGroup read the files at every call, so a
// file whose owner is a user made by the same reconcile finds it.
package account

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Errors of the account drivers.
var (
	// ErrIDChange is returned by Apply when an existing user's uid or
	// group's gid is not the one its spec declares, and the spec does
	// not say change_id: true.
	ErrIDChange = errors.New("id differs from the declared one")
	// ErrIDTaken is returned by Apply when the id a spec declares is
	// held by another user or group in the root's files.
	ErrIDTaken = errors.New("id held by another name")
	// ErrNoFreeID is returned by Apply when every id of the range a new
	// account would take is in use or reserved for another name.
	ErrNoFreeID = errors.New("no free id")
	// ErrNoGroup is returned by Apply when a user names a primary or
	// supplementary group that is not in the root's /etc/group (nor the
	// group of its own name that it makes): declare the group.
	ErrNoGroup = errors.New("group does not exist")
	// ErrPrimaryGroup is returned by Remove of a group that is the
	// primary group of a user still in the root's /etc/passwd.
	ErrPrimaryGroup = errors.New("group is a user's primary group")
	// ErrMalformed is returned when the line of the account a call must
	// read or change cannot be read: too few fields, an id that is not a
	// number. Lines of other accounts are never judged.
	ErrMalformed = errors.New("malformed account line")
	// ErrLocked is returned when /etc/.pwd.lock beneath the root stays
	// locked (by useradd, vipw or passwd, say) for longer than the lock
	// timeout.
	ErrLocked = errors.New("account files locked")
)

// What Options.Created is asked about.
const (
	// CreatedUser asks whether a user resource's Apply created the user.
	CreatedUser = "user"
	// CreatedGroup asks whether a group resource's Apply created the
	// group.
	CreatedGroup = "group"
	// CreatedUserGroup asks whether the Apply that created user NAME
	// also made the group NAME beside it, as its primary group: the
	// Apply whose Numbers reported a gid along with the uid.
	CreatedUserGroup = "user-group"
)

// DefaultLockTimeout is how long Apply and Remove wait for another
// process's lock on /etc/.pwd.lock: lckpwdf(3)'s 15 seconds.
const DefaultLockTimeout = 15 * time.Second

// Options configure the drivers; the host fills them from its journal.
type Options struct {
	// Reserved says which name held an id of kind "uid" or "gid" under
	// the host (the ids every Apply's Numbers reported). An id is never
	// allocated to another name, even once no line of the files holds
	// it, so that files left behind by a removed account never fall to a
	// new one; a name gets back an id it held, when that id is free. (An
	// id a spec declares is the declaration's to choose, and is refused
	// only when another account holds it.) Remove removes an account
	// only while it has an id Reserved says its name held: one made again
	// by someone else since is left in place. Nil reserves nothing, and
	// lets Created alone decide what Remove removes.
	Reserved func(kind string, id int) (name string, ok bool)
	// Created says whether the host made an account: kind is
	// CreatedUser, CreatedGroup or CreatedUserGroup, name the user's or
	// the group's name. Remove removes only what the host made; nil
	// means it made nothing, so every account is left in place.
	Created func(kind, name string) bool
	// Now is the clock of shadow's last change day; nil is time.Now.
	Now func() time.Time
	// LockTimeout bounds the wait for another process's lock on
	// /etc/.pwd.lock; zero is DefaultLockTimeout.
	LockTimeout time.Duration
}

// database is what both drivers work on: the root's four files and the
// lock over them.
type database struct {
	root *rootfs.Root
	opts Options
	// turn queues this driver's own edits, so that they wait on a
	// channel rather than poll the lock file against each other.
	turn *drivers.Turn
}

func newDatabase(root *rootfs.Root, opts Options) *database {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	return &database{root: root, opts: opts, turn: drivers.NewTurn()}
}

// created asks Options.Created.
func (db *database) created(kind, name string) bool {
	return db.opts.Created != nil && db.opts.Created(kind, name)
}

// madeHere says whether id of kind is one the host recorded for name
// (Options.Reserved): an account whose id the host never gave it was
// made again by someone else since, and is not the host's to remove.
// Without Reserved nothing is known, and Created alone decides.
func (db *database) madeHere(kind string, id int, name string) bool {
	if db.opts.Reserved == nil {
		return true
	}
	holder, ok := db.opts.Reserved(kind, id)
	return ok && holder == name
}

// lock waits for this driver's turn, then for the lock file: see
// lockFile.
func (db *database) lock(ctx context.Context) (unlock func(), err error) {
	release, err := db.turn.Take(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	unlockFile, err := lockFile(ctx, db.root, db.opts.LockTimeout)
	if err != nil {
		release()
		return nil, err
	}
	return func() { unlockFile(); release() }, nil
}

// change runs an edit of the files: first on the files as read without
// the lock, and when that changes nothing, that is the answer; else
// again under the lock, on the files read again, whose result it writes
// in order.
func (db *database) change(ctx context.Context, do func(*db) (edit, error), order func(*db) []*table) (edit, error) {
	d, err := readDB(db.root)
	if err != nil {
		return edit{}, err
	}
	e, err := do(d)
	if err != nil || !d.changed() {
		return e, err
	}
	unlock, err := db.lock(ctx)
	if err != nil {
		return edit{}, err
	}
	defer unlock()
	if d, err = readDB(db.root); err != nil {
		return edit{}, err
	}
	if e, err = do(d); err != nil {
		return edit{}, err
	}
	if err := ctx.Err(); err != nil {
		return edit{}, err
	}
	if err := d.write(db.root, order(d)); err != nil {
		return edit{}, err
	}
	return e, nil
}

// day is today as shadow counts days: since 1970-01-01, in UTC.
func (db *database) day() string {
	return strconv.FormatInt(db.opts.Now().Unix()/(24*60*60), 10)
}

// results keeps, per resource, what its last successful Apply reported:
// its ids (drivers.Numbered) and its note (drivers.Noter). A reconcile
// applies resources in parallel.
type results struct {
	mu      sync.Mutex
	numbers map[string][]drivers.Number
	notes   map[string]string
}

func (r *results) keep(key string, numbers []drivers.Number, note string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.numbers == nil {
		r.numbers, r.notes = map[string][]drivers.Number{}, map[string]string{}
	}
	r.numbers[key], r.notes[key] = numbers, note
}

func (r *results) get(key string) ([]drivers.Number, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.numbers[key]), r.notes[key]
}

// edit is what one Apply changed, or would change, in the files as read.
type edit struct {
	action  drivers.Action
	numbers []drivers.Number
	note    string
}
