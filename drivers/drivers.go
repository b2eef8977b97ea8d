// Package drivers is what every resource kind shares: the Driver interface
// the reconciler calls and its optional capabilities, the spec of each
// kind as a declaration states it, modes and path checks, resource
// identities, the shared errors, and the running of the tools drivers
// drive.
//
// Each kind's behaviour lives in its own package under drivers/ (file,
// directory, archive, pkg, unit, exec, account), which imports only this
// one and drivers/rootfs, the confined filesystem the drivers work under.
// This package does not import rootfs: what only names a spec
// (declarations, profiles, the control plane) links no filesystem system
// calls. It knows nothing of the journal or of how declarations are
// parsed.
package drivers

import (
	"context"
	"errors"
	"fmt"
	"path"
	"reflect"
	"strings"
)

// Errors shared by the drivers.
var (
	// ErrUnsafePath is returned for a path that is relative, unclean, or
	// would leave the root, and for a symlink found where a driver would
	// have to follow it.
	ErrUnsafePath = errors.New("unsafe path")
	// ErrToolMissing is returned when the tool a driver needs (dpkg,
	// systemctl) is not installed; the error names the tool.
	ErrToolMissing = errors.New("tool not installed")
	// ErrToolFailed is returned when a tool a driver runs (dpkg,
	// systemctl, systemd-analyze) ran and failed: the error carries the
	// command, how it ended and its own message (ToolOutput.Failed).
	ErrToolFailed = errors.New("tool failed")
	// ErrTimeout is returned when a driver's operation runs past the
	// driver's timeout (WithTimeout); the tool it was running is killed
	// with everything it started.
	ErrTimeout = errors.New("tool timed out")
	// ErrInvalidSpec is returned for a spec a driver cannot apply.
	ErrInvalidSpec = errors.New("invalid spec")
	// ErrWrongKind is returned when a driver is handed another kind's spec.
	ErrWrongKind = errors.New("spec of another kind")
)

// Action is what Apply did.
type Action string

// The actions Apply reports.
const (
	Created   Action = "created"
	Updated   Action = "updated"
	Unchanged Action = "unchanged"
)

// Observation is how a resource stands against its spec.
type Observation struct {
	// Exists is whether anything is at the resource's place.
	Exists bool
	// InSync is whether it matches the spec in every respect the spec states.
	InSync bool
	// Differs names each respect in which it does not: "absent", "content",
	// "mode", "owner", "group", "type", "enabled", "active", ...
	Differs []string
	// Seen is a digest of what was found ("" when absent), for drift records.
	Seen string
	// Note says something a person should know, e.g. "enablement only: no
	// service manager runs".
	Note string
	// Refused, when not nil, is the error Apply would return for what is
	// there (a directory where a file is declared, which the host never
	// replaces): a plan shows it as the step's foreseen failure, rather
	// than plan an update its apply refuses.
	Refused error `json:"-"`
}

// ErrLeftInPlace is wrapped by a Remove that found at the resource's path
// what is no longer the host's alone to remove: a directory holding
// entries the host does not own, something other than what it made. It
// is left as it is, and the reconciler releases it (event.ActionReleased):
// the host no longer owns it, rather than fail to remove it at every
// reconcile from then on.
var ErrLeftInPlace = errors.New("left in place")

// ErrNoParent is wrapped when a file, directory or archive cannot be laid
// down because its parent directory does not exist: the drivers create no
// parents, so the directory must be declared. A plan foresees it with the
// same error (NoParent), so that plan and apply say one thing.
var ErrNoParent = errors.New("parent directory does not exist")

// NoParent is the error for the kind of resource at p whose parent
// directory does not exist.
func NoParent(kind Kind, p string) error {
	return fmt.Errorf("%s %s: %w: declare the directory %s (the host creates no parents)", kind, p, ErrNoParent, path.Dir(p))
}

// Leaver is an optional Driver capability: whether Remove would leave the
// resource in place (ErrLeftInPlace), told without changing anything, once
// the same reconcile has removed the paths gone reports. A plan then says
// "released" where its apply will release, not "deleted". why is empty
// when Remove would remove it (or find it absent).
type Leaver interface {
	WouldLeave(ctx context.Context, spec Spec, gone func(path string) bool) (why string, err error)
}

// Located is an optional Driver capability: the path beneath the root a
// resource of a kind whose key is not a path lies at (a unit's file).
type Located interface {
	PathOf(spec Spec) string
}

// Nested is an optional Driver capability of a kind whose resources lie
// at their path beneath the root (Located) and whose Apply creates no
// parent directories: it fails with ErrNoParent where the parent does not
// exist. The reconciler applies such a resource after the one declared
// at its parent, and a plan foresees the error where there is none.
type Nested interface {
	Located
	// IsDirectory reports whether the resource of spec is a directory
	// that others may be declared in: a directory, or the one an archive
	// is unpacked into.
	IsDirectory(spec Spec) bool
}

// Driver manages one kind of resource under a root prefix.
type Driver interface {
	// Observe reports how the resource stands against spec. It never
	// changes anything.
	Observe(ctx context.Context, spec Spec) (Observation, error)
	// Apply makes the resource match spec and says what it did. Applying
	// twice is stable: the second reports Unchanged.
	Apply(ctx context.Context, spec Spec) (Action, error)
	// Remove removes the resource the host owns under spec's Key (the only
	// field it may read: see SpecForRemoval). Removing what is absent
	// succeeds. It never removes what the host does not own (a directory
	// with foreign contents stays): it then returns an error wrapping
	// ErrLeftInPlace.
	Remove(ctx context.Context, spec Spec) error
}

// Noter is an optional Driver capability: a note on what Apply could and
// could not do (a unit with no service manager running is "enablement
// only").
type Noter interface {
	ApplyNote(spec Spec) string
}

// Stager is an optional Driver capability: Apply in two phases, so that the
// reconciler can make a thousand files durable with one SyncFS of the root
// (rootfs.Root.SyncFS) between staging them all and committing them all,
// and one after, instead of two fsyncs a file. Nothing a Stage does is
// visible at the resource's path until Commit.
type Stager interface {
	// Stage prepares what Apply would do (writes a temporary file, say)
	// without making it visible. It returns nil when the resource already
	// matches spec.
	Stage(ctx context.Context, spec Spec) (Pending, error)
}

// Flusher is an optional Pending capability: the change made durable by
// itself, an fsync of what it wrote before Commit and of its directory
// after, rather than by rootfs.Root.SyncFS. The reconciler uses it for a
// few changes: two fsyncs are then cheaper than two flushes of a whole
// filesystem that holds other work, whose writes a SyncFS waits for too.
type Flusher interface {
	// FlushStaged makes what Stage wrote durable; before Commit.
	FlushStaged() error
	// FlushCommitted makes what Commit did durable; after it.
	FlushCommitted() error
}

// Pending is a staged change.
type Pending interface {
	// Commit makes the change visible (renames into place) and says what
	// it did.
	Commit() (Action, error)
	// Abort discards the staged change.
	Abort()
}

// Kind names a resource kind as declarations spell it.
type Kind string

// The kinds.
const (
	KindFile      Kind = "file"
	KindDirectory Kind = "directory"
	KindArchive   Kind = "archive"
	KindPackage   Kind = "package"
	KindUnit      Kind = "unit"
	KindExec      Kind = "exec"
	KindUser      Kind = "user"
	KindGroup     Kind = "group"
)

// Spec is one resource's desired state: *FileSpec, *DirectorySpec,
// *ArchiveSpec, *PackageSpec, *UnitSpec, *ExecSpec, *UserSpec or
// *GroupSpec.
type Spec interface {
	// Kind is the resource's kind.
	Kind() Kind
	// Key identifies the resource within its kind: a path, a package or
	// unit name.
	Key() string
}

// ID is a resource's identity across declarations and in the journal:
// kind ":" key, e.g. "file:/etc/motd".
func ID(s Spec) string { return string(s.Kind()) + ":" + s.Key() }

// SplitID parses an ID into its kind and key.
func SplitID(id string) (Kind, string, bool) {
	k, key, ok := strings.Cut(id, ":")
	return Kind(k), key, ok && key != ""
}

// SpecForRemoval returns the spec Remove needs for the resource id: only its
// key is set, which is all Remove reads. The host removes owned resources
// that a declaration no longer names; their full spec is not kept.
func SpecForRemoval(id string) (Spec, error) {
	kind, key, ok := SplitID(id)
	if !ok {
		return nil, fmt.Errorf("%w: resource id %q is not kind:key", ErrInvalidSpec, id)
	}
	switch kind {
	case KindFile:
		return &FileSpec{Path: key}, nil
	case KindDirectory:
		return &DirectorySpec{Path: key}, nil
	case KindArchive:
		return &ArchiveSpec{Path: key}, nil
	case KindPackage:
		return &PackageSpec{Name: key, State: Absent}, nil
	case KindUnit:
		return &UnitSpec{Name: key}, nil
	case KindExec:
		return &ExecSpec{Name: key}, nil
	case KindUser:
		return &UserSpec{Name: key}, nil
	case KindGroup:
		return &GroupSpec{Name: key}, nil
	}
	return nil, fmt.Errorf("%w: resource id %q names an unknown kind", ErrInvalidSpec, id)
}

// SpecAs checks what every driver call starts with: ctx has not ended, and
// spec is a non-nil spec of the driver's own kind S. name names the driver
// in errors ("file driver: ...").
func SpecAs[S Spec](ctx context.Context, spec Spec, name string) (S, error) {
	var zero S
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s driver: %w", name, err)
	}
	s, ok := spec.(S)
	if !ok {
		return zero, fmt.Errorf("%s driver: %w: got %T", name, ErrWrongKind, spec)
	}
	if v := reflect.ValueOf(s); v.Kind() == reflect.Pointer && v.IsNil() {
		return zero, fmt.Errorf("%s driver: %w: nil spec", name, ErrInvalidSpec)
	}
	return s, nil
}
