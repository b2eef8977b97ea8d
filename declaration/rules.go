package declaration

import (
	"fmt"
	"net/url"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
)

// The fields of a declaration's document, in the order they are written.
var documentFields = []string{"mesh", "node", "revision", "resources"}

// requiredFields are the document fields a declaration must state.
// revision may be left out: the control plane (meshctl declare) or the
// host (mesh-host apply) numbers such a declaration after the one it
// holds, so a file an operator keeps never has to follow numbers a
// release or a rollout used. What travels and is stored always carries
// one (linkproto.Declaration.For).
var requiredFields = []string{"mesh", "node", "resources"}

// version is the one variable an archive's values may hold; it expands to
// the hex of the archive's digest.
const version = "${version}"

// The patterns a value must match, in the syntax shared by Go's regexp and
// the ECMA-262 dialect of JSON Schema, so that the schema states exactly
// what the parser checks.
const (
	// pathElem is one path element that is neither "." nor "..".
	pathElem = `([^./\x00][^/\x00]*|\.[^./\x00][^/\x00]*|\.\.[^/\x00]+)`
	// pathPattern is an absolute, clean path other than "/".
	pathPattern    = `^(/` + pathElem + `)+$`
	modePattern    = `^[0-7]{3,4}$`
	digestPattern  = `^sha256:[0-9a-f]{64}$`
	sourcePattern  = `^(file:///|https?://[^/?#]+)`
	packagePattern = `^[a-z0-9][a-z0-9+.-]*$`
	unitPattern    = `^[A-Za-z0-9:_.@\\-]+\.(service|socket|timer|target|path|mount)$`
	// execNamePattern names an exec: its ID is exec:NAME.
	execNamePattern = `^[A-Za-z0-9][A-Za-z0-9_.@-]*$`
	// relationPattern is a resource's ID: a kind, ":" and its key.
	relationPattern = `^(file|directory|archive|package|unit|exec|user|group):.+$`
	// envPattern is an environment entry, NAME=value.
	envPattern  = `^[A-Za-z_][A-Za-z0-9_]*=`
	namePattern = `^[^:/]+$`
	// secretNamePattern names a secret in the control plane's store.
	secretNamePattern = `^[a-z0-9][a-z0-9_.-]{0,62}$`
	// sealedPattern is a sealed value: unpadded base64url.
	sealedPattern = `^[A-Za-z0-9_-]+$`
	// curveKeyPattern is a public curve (sealing) nkey.
	curveKeyPattern = `^X[A-Z2-7]{55}$`
)

// maxSealed bounds a sealed value: a secret is a password or a key, not a
// payload.
const maxSealed = 256 << 10

var unitSuffixes = []string{".service", ".socket", ".timer", ".target", ".path", ".mount"}

// rule is what a spec field's value must be beyond its Go type. The
// parser checks it and Schema states it.
type rule struct {
	desc string
	// def is the value an absent field stands for, if any.
	def string
	// nonEmpty refuses the empty string.
	nonEmpty bool
	enum     []string
	// pattern is checked after check; a value check passes must match it.
	pattern string
	// check says what is wrong with a string value, or "".
	check func(string) string
	// limit is the size limit the value is held to, checked first.
	limit sizeLimit
	// maxItems bounds a list's length; the rule's other checks hold each
	// of its items. nonEmpty refuses an empty list too.
	maxItems int
	// min and max bound each number of a list of numbers.
	min, max int
}

// rules holds a rule for every field of every kind's spec, by JSON name;
// TestRulesCoverFields holds it to the spec types in package drivers.
var rules = map[drivers.Kind]map[string]rule{
	drivers.KindFile: withRelations(map[string]rule{
		"path":         {desc: "Absolute, clean path of the file.", pattern: pathPattern, check: plainPath, limit: pathLimit},
		"content":      {desc: "The file's whole content; may be empty, but must be given.", limit: contentLimit},
		"mode":         modeRule("Permission mode as an octal string; defaults to \"0644\"."),
		"owner":        nameRule("User owning the file, by name; defaults to root."),
		"group":        nameRule("Group owning the file, by name; defaults to root."),
		"special_bits": {desc: "Allows the mode to set setuid, setgid or the sticky bit; without it such a mode is refused. Defaults to false."},
		"secret": {desc: "The file's content is the secret of this name, sealed to the node by the control plane; " +
			"content is then empty (in YAML, content: {secret: NAME} says the same)."},
	}),
	drivers.KindDirectory: withRelations(map[string]rule{
		"path":  {desc: "Absolute, clean path of the directory.", pattern: pathPattern, check: plainPath, limit: pathLimit},
		"mode":  modeRule("Permission mode as an octal string; defaults to \"0755\"."),
		"owner": nameRule("User owning the directory, by name; defaults to root."),
		"group": nameRule("Group owning the directory, by name; defaults to root."),
		"special_bits": {desc: "Allows the mode to set setuid, setgid (a shared group directory) or the sticky bit; " +
			"without it such a mode is refused. Defaults to false."},
	}),
	drivers.KindArchive: withRelations(map[string]rule{
		"path": {desc: "Absolute, clean path of the directory the archive unpacks into; " +
			version + " expands to the digest's hex.", pattern: pathPattern, check: archivePath, limit: pathLimit},
		"source": {desc: "Where to fetch the archive: a file://, http:// or https:// URL " +
			"(a file URL's path is beneath the root, as every path is); " +
			version + " expands to the digest's hex.", pattern: sourcePattern, check: source},
		"digest": {desc: "The archive's sha256 digest, checked before anything is unpacked.",
			pattern: digestPattern, check: digest},
		"format": {desc: "The archive's format.", enum: []string{
			drivers.FormatTar, drivers.FormatTarGz, drivers.FormatTarZst, drivers.FormatZip}},
	}),
	drivers.KindPackage: withRelations(map[string]rule{
		"name": {desc: "The package's name; never a version.", pattern: packagePattern, check: packageName, limit: nameLimit},
		"state": {desc: "Whether the package is present or absent.", def: drivers.Present,
			enum: []string{drivers.Present, drivers.Absent}},
	}),
	drivers.KindUnit: withRelations(map[string]rule{
		"name": {desc: "The unit's name with its suffix, such as \"app.service\".", pattern: unitPattern, check: unitName, limit: nameLimit},
		"content": {desc: "The unit file's content, written in /etc/systemd/system; leave it out for a unit whose file a package installs " +
			"(the host then holds only whether it is enabled and active).", nonEmpty: true, limit: contentLimit},
		"enabled": {desc: "Whether the unit is enabled; defaults to false."},
		"active":  {desc: "Whether the unit is running; defaults to false."},
		"refresh": {desc: "How the unit is refreshed when a resource it listens to changes: restart (the default), reload or reload-or-restart.",
			enum: []string{drivers.RefreshRestart, drivers.RefreshReload, drivers.RefreshReloadOrRestart}},
	}),
	drivers.KindExec: withRelations(map[string]rule{
		"name": {desc: "The exec's name: its ID is exec:NAME.", pattern: execNamePattern, check: execName, limit: nameLimit},
		"command": {desc: "The command as an argv, never run through a shell unless its first word names one; " +
			"the first word is an absolute path or a name on the host's PATH.", nonEmpty: true, maxItems: maxArgs, limit: argLimit},
		"creates": {desc: "A path beneath the root: the exec runs only when nothing is there.", pattern: pathPattern, check: plainPath, limit: pathLimit},
		"unless":  {desc: "An argv: the exec runs only when it exits non-zero.", nonEmpty: true, maxItems: maxArgs, limit: argLimit},
		"onlyif":  {desc: "An argv: the exec runs only when it exits zero.", nonEmpty: true, maxItems: maxArgs, limit: argLimit},
		"refresh_only": {desc: "The exec runs only when refreshed (a resource that notifies it changed), never by itself. " +
			"Defaults to false."},
		"timeout": {desc: "How long a run may take, as a duration such as \"30s\" or \"5m\" (at most 24h); defaults to 5m.", check: timeout},
		"user":    nameRule("The user the command runs as, by name in the root's passwd; defaults to root."),
		"group":   nameRule("The group the command runs as, by name in the root's group; defaults to the user's."),
		"cwd":     {desc: "The working directory, beneath the root; defaults to the root.", pattern: pathPattern, check: plainPath, limit: pathLimit},
		"env": {desc: "Variables added to the command's minimal environment, each NAME=value.", maxItems: maxEnv,
			pattern: envPattern, check: envEntry, limit: argLimit},
		"success_codes": {desc: "The exit codes that mean success; defaults to [0].", maxItems: 256, min: 0, max: 255},
	}),
	drivers.KindUser: withRelations(map[string]rule{
		"name": accountRule("The user's login name."),
		"uid": {desc: "The user's id; left out, the host allocates one that no other name has held.", min: 0, max: maxID,
			check: id},
		"group":   accountRule("The primary group, by name; left out, the host makes a group of the user's name beside it."),
		"groups":  {desc: "Supplementary groups, by name: the user's supplementary groups are exactly these.", maxItems: 256, pattern: accountPattern, check: accountName, limit: nameLimit},
		"home":    {desc: "The home directory's path (not created: declare a directory).", pattern: pathPattern, check: plainPath, limit: pathLimit},
		"shell":   {desc: "The login shell's path.", pattern: pathPattern, check: plainPath, limit: pathLimit},
		"system":  {desc: "A system user: its id from the system range. Defaults to false."},
		"comment": {desc: "The comment (GECOS) field.", check: gecos, limit: nameLimit},
		"password": {desc: "The password's crypt(3) hash, as a secret: {secret: NAME}, sealed to the node by the control plane; " +
			"left out, the account is locked."},
		"change_id": {desc: "Allows changing the id of a user that exists with another; without it that is refused. Defaults to false."},
	}),
	drivers.KindGroup: withRelations(map[string]rule{
		"name":      accountRule("The group's name."),
		"gid":       {desc: "The group's id; left out, the host allocates one that no other name has held.", min: 0, max: maxID, check: id},
		"system":    {desc: "A system group: its id from the system range. Defaults to false."},
		"change_id": {desc: "Allows changing the id of a group that exists with another; without it that is refused. Defaults to false."},
	}),
}

// accountPattern is a user or group name as Debian's useradd takes one.
const accountPattern = `^[a-z_][a-z0-9_-]{0,31}[$]?$`

// maxID is the largest user or group id: 2^31-1 less one, as shadow-utils
// allows.
const maxID = 1<<31 - 2

func accountRule(desc string) rule {
	return rule{desc: desc, nonEmpty: true, pattern: accountPattern, check: accountName, limit: nameLimit}
}

func accountName(s string) string {
	if !accountRegexp.MatchString(s) {
		return fmt.Sprintf("%q is not a user or group name: lower-case letters, digits, \"_\" and \"-\", starting with a letter or \"_\", at most 32", s)
	}
	return ""
}

// id refuses the ids that mean "no one" to the kernel and to NFS.
func id(s string) string {
	if s == "65535" {
		return "65535 is (uint16)-1, which some tools read as no id: choose another"
	}
	return ""
}

func gecos(s string) string {
	if strings.ContainsAny(s, ":\n") {
		return fmt.Sprintf("%q holds \":\" or a newline, which would break the passwd line", s)
	}
	return ""
}

// The relations every kind has, by ID of another resource of the same
// declaration.
var relationRules = map[string]rule{
	"requires": {desc: "Resources applied before this one, by ID (kind:key); when one of them fails, this one is skipped.",
		maxItems: maxRelations, pattern: relationPattern, check: relationID, limit: relationLimit},
	"notify": {desc: "Units or execs refreshed when this resource changes (created, updated or repaired), by ID; they are applied after it.",
		maxItems: maxRelations, pattern: relationPattern, check: relationID, limit: relationLimit},
	"subscribe": {desc: "Resources whose change refreshes this unit or exec, by ID; they are applied before it.",
		maxItems: maxRelations, pattern: relationPattern, check: relationID, limit: relationLimit},
}

// relationKinds are the kinds a relation may name, as relationPattern
// spells them.
var relationKinds = []string{"file", "directory", "archive", "package", "unit", "exec", "user", "group"}

// withRelations adds the relations' rules to a kind's.
func withRelations(r map[string]rule) map[string]rule {
	for name, rel := range relationRules {
		r[name] = rel
	}
	return r
}

// Bounds on the lists a resource holds: generous for what people write,
// and what keeps one resource from holding a declaration's worth.
const (
	maxRelations = 1024
	maxArgs      = 1024
	maxEnv       = 256
)

func modeRule(desc string) rule {
	return rule{desc: desc, pattern: modePattern, check: mode}
}

func nameRule(desc string) rule {
	return rule{desc: desc, nonEmpty: true, pattern: namePattern, check: ownerName, limit: nameLimit}
}

// kind is one resource kind as a declaration spells it.
type kind struct {
	kind drivers.Kind
	desc string
	typ  reflect.Type
	// fields are the spec's fields in struct order.
	fields []specField
}

// specField is one field of a spec struct.
type specField struct {
	name string
	// index is the field's index sequence in the spec struct (for
	// reflect.Value.FieldByIndex): a relation is a field of the
	// Relations every spec embeds.
	index    []int
	typ      reflect.Type
	required bool
	rule     rule
}

var (
	modeType    = reflect.TypeFor[*drivers.Mode]()
	secretType  = reflect.TypeFor[*drivers.Secret]()
	stringsType = reflect.TypeFor[[]string]()
	intPtrType  = reflect.TypeFor[*int]()
	intsType    = reflect.TypeFor[[]int]()
)

// kinds are the kinds in the order messages list them. Their fields come
// from the spec types' json tags: a field without omitempty is required.
var kinds = []kind{
	newKind(drivers.KindFile, "A regular file with the given content.", reflect.TypeFor[drivers.FileSpec]()),
	newKind(drivers.KindDirectory, "A directory; removing it never removes what the host does not own in it.", reflect.TypeFor[drivers.DirectorySpec]()),
	newKind(drivers.KindArchive, "An archive fetched by digest and unpacked whole at its path.", reflect.TypeFor[drivers.ArchiveSpec]()),
	newKind(drivers.KindPackage, "A package that is present or absent.", reflect.TypeFor[drivers.PackageSpec]()),
	newKind(drivers.KindUnit, "A systemd unit, its file unless a package installs it, and whether it is enabled and active.", reflect.TypeFor[drivers.UnitSpec]()),
	newKind(drivers.KindExec, "A command run when its guards say it is needed: creates, unless, onlyif or refresh_only.", reflect.TypeFor[drivers.ExecSpec]()),
	newKind(drivers.KindUser, "A user account in the root's passwd and shadow.", reflect.TypeFor[drivers.UserSpec]()),
	newKind(drivers.KindGroup, "A group in the root's group and gshadow.", reflect.TypeFor[drivers.GroupSpec]()),
}

func newKind(k drivers.Kind, desc string, t reflect.Type) kind {
	out := kind{kind: k, desc: desc, typ: t}
	for _, f := range reflect.VisibleFields(t) {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || f.Anonymous || name == "-" || name == "" {
			continue
		}
		out.fields = append(out.fields, specField{
			name:     name,
			index:    f.Index,
			typ:      f.Type,
			required: !slices.Contains(strings.Split(opts, ","), "omitempty"),
			rule:     rules[k][name],
		})
	}
	return out
}

func lookupKind(name string) (kind, bool) {
	for _, k := range kinds {
		if string(k.kind) == name {
			return k, true
		}
	}
	return kind{}, false
}

func (k kind) field(name string) (specField, bool) {
	for _, f := range k.fields {
		if f.name == name {
			return f, true
		}
	}
	return specField{}, false
}

func (k kind) fieldNames() []string {
	names := make([]string, len(k.fields))
	for i, f := range k.fields {
		names[i] = f.name
	}
	return names
}

func kindNames() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k.kind)
	}
	return names
}

var (
	modeRegexp       = regexp.MustCompile(modePattern)
	secretNameRegexp = regexp.MustCompile(secretNamePattern)
	sealedRegexp     = regexp.MustCompile(sealedPattern)
	curveKeyRegexp   = regexp.MustCompile(curveKeyPattern)
	packageRegexp    = regexp.MustCompile(packagePattern)
	execNameRegexp   = regexp.MustCompile(execNamePattern)
	envRegexp        = regexp.MustCompile(envPattern)
	accountRegexp    = regexp.MustCompile(accountPattern)
)

// patterns holds every rule's pattern, compiled.
var patterns = compilePatterns()

func compilePatterns() map[string]*regexp.Regexp {
	out := map[string]*regexp.Regexp{}
	for _, byField := range rules {
		for _, r := range byField {
			if r.pattern != "" {
				out[r.pattern] = regexp.MustCompile(r.pattern)
			}
		}
	}
	return out
}

// problem says what is wrong with a string value under r, or "".
func (r rule) problem(s string) string {
	switch {
	case s == "" && (r.nonEmpty || r.check != nil || r.enum != nil):
		return "must not be empty"
	case r.enum != nil && !slices.Contains(r.enum, s):
		return fmt.Sprintf("must be %s, not %q", oneOf(r.enum), s)
	}
	if r.check != nil {
		if p := r.check(s); p != "" {
			return p
		}
	}
	if r.pattern != "" && !patterns[r.pattern].MatchString(s) {
		return fmt.Sprintf("%q does not match %s", s, r.pattern)
	}
	return ""
}

// oneOf spells a list of choices: "a or b", "a, b or c".
func oneOf(choices []string) string { return list(choices, "or") }

// allOf spells a list of things all wanted: "a, b and c".
func allOf(items []string) string { return list(items, "and") }

func list(items []string, conj string) string {
	if len(items) == 1 {
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conj + " " + items[len(items)-1]
}

// article is "a" or "an", as the word after it wants.
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// pathProblem checks an absolute, clean path that is not "/".
func pathProblem(p string) string {
	switch {
	case strings.ContainsRune(p, 0):
		return fmt.Sprintf("%q contains a NUL byte", p)
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q is not absolute: it must start with /", p)
	case p == "/":
		return "must not be / itself"
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Sprintf("%q must not contain \"..\"", p)
	case path.Clean(p) != p:
		return fmt.Sprintf("%q is not clean: write %q", p, path.Clean(p))
	}
	return ""
}

// plainPath is the path of a file or directory, where nothing expands.
func plainPath(p string) string {
	if strings.Contains(p, version) {
		return fmt.Sprintf("%q: %s expands only in an archive's values", p, version)
	}
	return pathProblem(p)
}

// archivePath is checked as written: the digest's hex in place of
// ${version} can neither make a path unclean nor make it "/", so a path
// that passes here passes expanded, and the messages show what was written.
func archivePath(p string) string {
	if v := unknownVariable(p); v != "" {
		return v
	}
	return pathProblem(p)
}

// unknownVariable reports a "${" that does not start ${version}.
func unknownVariable(s string) string {
	for rest := s; ; {
		i := strings.Index(rest, "${")
		if i < 0 {
			return ""
		}
		rest = rest[i:]
		if !strings.HasPrefix(rest, version) {
			name := rest
			if j := strings.IndexByte(rest, '}'); j >= 0 {
				name = rest[:j+1]
			}
			return fmt.Sprintf("unknown variable %q: only %s expands", name, version)
		}
		rest = rest[len(version):]
	}
}

func source(s string) string {
	if v := unknownVariable(s); v != "" {
		return v
	}
	u, err := url.Parse(strings.ReplaceAll(s, version, dummyHex))
	switch {
	case err != nil || !strings.HasPrefix(s, "file:") && !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://"):
		return fmt.Sprintf("%q is not a file://, http:// or https:// URL", s)
	case u.Scheme == "file":
		if u.Host != "" || !strings.HasPrefix(s, "file:///") {
			return fmt.Sprintf("%q: a file URL holds an absolute path and no host, as in file:///srv/app.tar.gz", s)
		}
		if err := drivers.CheckPath(u.Path); err != nil {
			return fmt.Sprintf("%q: its path is beneath the root, and %v", s, err)
		}
	case u.Host == "":
		return fmt.Sprintf("%q has no host", s)
	}
	return ""
}

// dummyHex stands for a digest's hex where a value is checked unexpanded.
var dummyHex = strings.Repeat("0", 64)

func digest(s string) string {
	hex, ok := strings.CutPrefix(s, "sha256:")
	want := "want \"sha256:\" and 64 lowercase hex digits"
	switch {
	case !ok:
		return fmt.Sprintf("%q is not a sha256 digest: %s", s, want)
	case len(hex) != 64:
		return fmt.Sprintf("%q has %d hex digits: %s", s, len(hex), want)
	case strings.ToLower(hex) != hex:
		return fmt.Sprintf("%q has upper-case hex digits: %s", s, want)
	}
	for _, c := range hex {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return fmt.Sprintf("%q holds %q, which is not a hex digit: %s", s, c, want)
		}
	}
	return ""
}

func mode(s string) string {
	if !modeRegexp.MatchString(s) {
		return fmt.Sprintf("%q is not an octal mode like \"0644\"", s)
	}
	if _, err := drivers.ParseMode(s); err != nil {
		return err.Error()
	}
	return ""
}

func ownerName(s string) string {
	if strings.ContainsAny(s, ":/") {
		return fmt.Sprintf("%q is not a user or group name: it must not contain \":\" or \"/\"", s)
	}
	return ""
}

func packageName(s string) string {
	if !packageRegexp.MatchString(s) {
		return fmt.Sprintf("%q is not a package name: lower-case letters, digits, \"+\", \"-\" and \".\", starting with a letter or digit", s)
	}
	return ""
}

func execName(s string) string {
	if !execNameRegexp.MatchString(s) {
		return fmt.Sprintf("%q is not an exec's name: letters, digits, \"_\", \".\", \"@\" and \"-\", starting with a letter or digit", s)
	}
	return ""
}

// maxTimeout bounds an exec's timeout: a command that needs longer is a
// service, not a step of a reconcile.
const maxTimeout = 24 * time.Hour

func timeout(s string) string {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not a duration such as \"30s\" or \"5m\"", s)
	case d <= 0:
		return fmt.Sprintf("%q must be longer than nothing", s)
	case d > maxTimeout:
		return fmt.Sprintf("%q is over %s: a command that runs longer is a service", s, maxTimeout)
	}
	return ""
}

func envEntry(s string) string {
	if !envRegexp.MatchString(s) {
		return fmt.Sprintf("%q is not NAME=value (a name of letters, digits and \"_\", not starting with a digit)", s)
	}
	if strings.ContainsRune(s, 0) {
		return fmt.Sprintf("%q contains a NUL byte", s)
	}
	return ""
}

// relationID checks the shape of a relation's ID; that it names a
// resource of the declaration is checked once every resource is read.
func relationID(s string) string {
	k, key, ok := strings.Cut(s, ":")
	if !ok || key == "" {
		return fmt.Sprintf("%q is not a resource's ID: write kind:key, as in \"file:/etc/motd\" or \"unit:app.service\"", s)
	}
	// Not lookupKind: the kinds are built from these rules.
	if !slices.Contains(relationKinds, k) {
		return fmt.Sprintf("%q names no kind (known: %s)", s, strings.Join(relationKinds, ", "))
	}
	return ""
}

func unitName(s string) string {
	if strings.Contains(s, "/") {
		return fmt.Sprintf("%q must not contain \"/\": give the unit's name, not a path", s)
	}
	i := slices.IndexFunc(unitSuffixes, func(suffix string) bool { return strings.HasSuffix(s, suffix) })
	if i < 0 {
		return fmt.Sprintf("%q must end in %s", s, oneOf(unitSuffixes))
	}
	if s == unitSuffixes[i] {
		return fmt.Sprintf("%q has no name before its suffix", s)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(":_.@\\-", c)) {
			return fmt.Sprintf("%q contains %q, which a unit name cannot", s, c)
		}
	}
	return ""
}

// Kinds are the resource kinds a declaration may hold, in the order
// messages list them.
func Kinds() []drivers.Kind {
	out := make([]drivers.Kind, len(kinds))
	for i, k := range kinds {
		out[i] = k.kind
	}
	return out
}
