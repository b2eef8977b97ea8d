package drivers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// Mode is a permission mode written as an octal string ("0644"), never a
// decimal number: 644 and 0644 are not the same mode.
type Mode uint32

// ParseMode reads an octal mode such as "0644" or "644"; the setuid, setgid
// and sticky bits are allowed, nothing above them.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return 0, fmt.Errorf("mode is empty")
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, fmt.Errorf("mode %q is not an octal mode like \"0644\"", s)
	}
	return Mode(v), nil
}

func (m Mode) String() string { return fmt.Sprintf("%04o", uint32(m)) }

// MarshalJSON writes the mode as an octal string.
func (m Mode) MarshalJSON() ([]byte, error) { return json.Marshal(m.String()) }

// UnmarshalJSON reads an octal string; a JSON number is refused.
func (m *Mode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("mode must be an octal string like \"0644\", not %s", b)
	}
	v, err := ParseMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// FileSpec is a regular file with the given content.
type FileSpec struct {
	// Path is absolute and clean, under the root prefix.
	Path    string `json:"path"`
	Content string `json:"content"`
	// Mode defaults to 0644.
	Mode *Mode `json:"mode,omitempty"`
	// Owner and Group are names resolved in the root's own etc/passwd and
	// etc/group; they default to root.
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// SpecialBits allows Mode to set setuid, setgid or the sticky bit:
	// without it such a mode is refused, so that no declaration makes a
	// setuid root file by a slip of the mode.
	SpecialBits bool `json:"special_bits,omitempty"`
	// Secret, when set, is the file's content instead of Content (which
	// is then empty): a value the declaration names and that travels and
	// is stored sealed to the node.
	Secret *Secret `json:"secret,omitempty"`
	Relations
}

// Secret is a file's content that is never held in the clear by anything
// that is kept: the declaration names it, the control plane seals it to
// the node's own key, and the journal, the events stream and every output
// hold the sealed form only. The host opens it in memory when it
// reconciles and Provides the value to the driver; it is never encoded
// (the unexported fields have no JSON), so spec digests and records are
// over the sealed form.
type Secret struct {
	// Name is the secret's name in the control plane's store.
	Name string `json:"name"`
	// Sealed is the value sealed to the node's key (base64), and Sender
	// the mesh's sealing key that sealed it; both empty in a declaration
	// as an operator writes it, both set in one a node receives.
	Sealed string `json:"sealed,omitempty"`
	Sender string `json:"sender,omitempty"`

	value     []byte
	digestKey []byte
	opened    bool
}

// Provide gives the secret its opened value and the node's digest key:
// what the file driver writes, and the key of the keyed digest it reports
// the file's content by, so that no record holds a plain hash of the
// value (a low-entropy password would be guessable from one).
func (s *Secret) Provide(value, digestKey []byte) {
	s.value, s.digestKey, s.opened = value, digestKey, true
}

// Opened returns the value and the digest key given by Provide; ok is
// false when the secret was not opened.
func (s *Secret) Opened() (value, digestKey []byte, ok bool) {
	return s.value, s.digestKey, s.opened
}

// DirectorySpec is a directory. Removing it never removes what is in it
// that the host does not own.
type DirectorySpec struct {
	Path string `json:"path"`
	// Mode defaults to 0755.
	Mode  *Mode  `json:"mode,omitempty"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// SpecialBits allows Mode to set setuid, setgid or the sticky bit, as
	// a file's does: a shared group directory (setgid) or a world-writable
	// one (sticky) only when the declaration says so.
	SpecialBits bool `json:"special_bits,omitempty"`
	Relations
}

// Archive formats.
const (
	FormatTar    = "tar"
	FormatTarGz  = "tar.gz"
	FormatTarZst = "tar.zst"
	FormatZip    = "zip"
)

// ArchiveSpec is an archive fetched by digest and unpacked at Path, which
// appears whole or not at all.
type ArchiveSpec struct {
	// Path is the destination directory; "${version}" in it (and in any
	// value of the resource) expands to the digest's hex.
	Path string `json:"path"`
	// Source is an http, https or file URL. A file URL's path is beneath
	// the root, as Path is: file:///srv/a.tar is <root>/srv/a.tar.
	Source string `json:"source"`
	// Digest is "sha256:" and 64 hex digits, checked before anything is
	// unpacked.
	Digest string `json:"digest"`
	// Format is tar, tar.gz, tar.zst or zip.
	Format string `json:"format"`
	Relations
}

// Package states.
const (
	Present = "present"
	Absent  = "absent"
)

// PackageSpec asserts that a package is present or absent; never a version.
type PackageSpec struct {
	Name string `json:"name"`
	// State is present (the default) or absent.
	State string `json:"state,omitempty"`
	Relations
}

// UnitSpec is a systemd unit, its file when the declaration writes it, and
// whether it is enabled and active.
type UnitSpec struct {
	// Name is the unit's name with its suffix: "nginx.service".
	Name string `json:"name"`
	// Content is the unit file the host writes in /etc/systemd/system;
	// empty for a unit whose file someone else installs (a package's
	// /lib/systemd/system/nginx.service): the host then holds only its
	// enablement and activity, and never writes or removes its file.
	Content string `json:"content,omitempty"`
	Enabled bool   `json:"enabled,omitempty"`
	Active  bool   `json:"active,omitempty"`
	// Refresh is how the unit is refreshed when a resource it listens
	// to changes: restart (the default), reload or reload-or-restart.
	Refresh string `json:"refresh,omitempty"`
	Relations
}

// ExecSpec is a command the host runs when its guards say it is needed:
// never through a shell unless Command names one, with empty standard
// input, in a process group (and, where a service manager runs, a
// transient unit) of its own, so that a timeout kills everything it
// started. An exec is idempotent by construction: it has at least one
// guard (Creates, Unless, OnlyIf or RefreshOnly).
type ExecSpec struct {
	// Name identifies the exec in the declaration and the journal
	// ("exec:migrate-db").
	Name string `json:"name"`
	// Command is the argv: Command[0] is an absolute path or a name
	// looked up on the host's PATH.
	Command []string `json:"command"`
	// Creates is a path beneath the root: the exec runs only when
	// nothing is there.
	Creates string `json:"creates,omitempty"`
	// Unless is an argv: the exec runs only when it exits non-zero.
	Unless []string `json:"unless,omitempty"`
	// OnlyIf is an argv: the exec runs only when it exits zero.
	OnlyIf []string `json:"onlyif,omitempty"`
	// RefreshOnly: the exec runs only when refreshed (a resource that
	// notifies it changed), never by itself.
	RefreshOnly bool `json:"refresh_only,omitempty"`
	// Timeout bounds a run (a Go duration: "30s", "5m"); default 5m.
	Timeout string `json:"timeout,omitempty"`
	// User and Group run it as that user and group of the root's own
	// passwd and group; default root.
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
	// Cwd is the working directory, beneath the root; default the root.
	Cwd string `json:"cwd,omitempty"`
	// Env are NAME=value pairs added to a minimal environment.
	Env []string `json:"env,omitempty"`
	// SuccessCodes are the exit codes that mean success; default [0].
	SuccessCodes []int `json:"success_codes,omitempty"`
	Relations
}

func (*FileSpec) Kind() Kind         { return KindFile }
func (s *FileSpec) Key() string      { return s.Path }
func (*DirectorySpec) Kind() Kind    { return KindDirectory }
func (s *DirectorySpec) Key() string { return s.Path }
func (*ArchiveSpec) Kind() Kind      { return KindArchive }
func (s *ArchiveSpec) Key() string   { return s.Path }
func (*PackageSpec) Kind() Kind      { return KindPackage }
func (s *PackageSpec) Key() string   { return s.Name }

// UserSpec is a user account in the root's passwd and shadow, edited by
// the host itself under the shadow-utils lock, every line it does not own
// kept as it was.
type UserSpec struct {
	// Name is the login name.
	Name string `json:"name"`
	// UID is the user's id; nil lets the host allocate one that no other
	// name ever held (System picks from the system range).
	UID *int `json:"uid,omitempty"`
	// Group names the primary group; empty makes (and owns) a group of
	// the user's name beside the user, as useradd does.
	Group string `json:"group,omitempty"`
	// Groups are supplementary groups, by name.
	Groups []string `json:"groups,omitempty"`
	// Home is the home directory's path (never created or removed by
	// this resource: declare a directory); Shell the login shell.
	Home  string `json:"home,omitempty"`
	Shell string `json:"shell,omitempty"`
	// System takes the id from the system range (below 1000).
	System bool `json:"system,omitempty"`
	// Comment is the GECOS field.
	Comment string `json:"comment,omitempty"`
	// Password is the password's crypt(3) hash, given as a secret: never
	// in the clear in the declaration, the journal or an output. Without
	// it the account is locked ("!").
	Password *Secret `json:"password,omitempty"`
	// ChangeID allows the host to change the id of an existing user to
	// UID; without it a different id is refused, never changed silently.
	ChangeID bool `json:"change_id,omitempty"`
	Relations
}

// GroupSpec is a group in the root's group and gshadow.
type GroupSpec struct {
	Name string `json:"name"`
	// GID is the group's id; nil lets the host allocate one.
	GID    *int `json:"gid,omitempty"`
	System bool `json:"system,omitempty"`
	// ChangeID allows changing an existing group's id to GID.
	ChangeID bool `json:"change_id,omitempty"`
	Relations
}

func (*UnitSpec) Kind() Kind     { return KindUnit }
func (s *UnitSpec) Key() string  { return s.Name }
func (*ExecSpec) Kind() Kind     { return KindExec }
func (s *ExecSpec) Key() string  { return s.Name }
func (*UserSpec) Kind() Kind     { return KindUser }
func (s *UserSpec) Key() string  { return s.Name }
func (*GroupSpec) Kind() Kind    { return KindGroup }
func (s *GroupSpec) Key() string { return s.Name }

var (
	_ Refreshable = (*UnitSpec)(nil)
	_ Refreshable = (*ExecSpec)(nil)
)

// HowRefreshed is how the unit is refreshed: Refresh, restart when unset.
func (s *UnitSpec) HowRefreshed() string {
	if s.Refresh != "" {
		return s.Refresh
	}
	return RefreshRestart
}

// HowRefreshed is what refreshing an exec does: it runs.
func (*ExecSpec) HowRefreshed() string { return "run" }

// ModeOr returns *m, or def when m is nil.
func ModeOr(m *Mode, def Mode) Mode {
	if m == nil {
		return def
	}
	return *m
}

// SpecDigest is "sha256:" and the hex digest of the spec's canonical JSON:
// what the journal records as the spec a resource was applied with.
func SpecDigest(s Spec) string {
	b, err := json.Marshal(struct {
		Kind Kind `json:"kind"`
		Spec Spec `json:"spec"`
	}{s.Kind(), s})
	if err != nil {
		panic("drivers: spec does not encode: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SecretField is a field of a spec that holds a secret: a file's content,
// a user's password.
type SecretField struct {
	// What names the field for a message: "file /etc/app.key", "user
	// shop's password".
	What string
	// Secret is the field: whoever seals or opens the secret sets it.
	Secret **Secret
}

// SecretFields returns the fields of spec that hold a secret, set or not
// (Secret points at a nil *Secret when the field holds none).
func SecretFields(spec Spec) []SecretField {
	switch s := spec.(type) {
	case *FileSpec:
		return []SecretField{{What: "file " + s.Path, Secret: &s.Secret}}
	case *UserSpec:
		return []SecretField{{What: "user " + s.Name + "'s password", Secret: &s.Password}}
	}
	return nil
}

// NamesSecret reports whether spec holds a secret in any field.
func NamesSecret(spec Spec) bool {
	for _, f := range SecretFields(spec) {
		if *f.Secret != nil {
			return true
		}
	}
	return false
}
