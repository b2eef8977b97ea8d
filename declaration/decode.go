package declaration

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mesh-host/mesh-host/drivers"
)

// decoder walks a YAML node tree (parsed from YAML or built from JSON)
// against the fields a declaration may have, collecting every problem.
type decoder struct {
	file string
	errs Errors
	// most is how many resources a declaration may hold: MaxResources,
	// or fewer in tests.
	most int
	// refused is set once a list parsed in chunks was found to hold more
	// than most resources: its refusal is the whole parse's.
	refused bool
	// chunked is the resources list to decode a chunk at a time, in place
	// of the tree's (stream.go); nil to decode the tree's.
	chunked *resourceList
	// refs are the IDs the resources' relations name, checked once all
	// are read (checkRelations).
	refs []relationRef
}

func (d *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Column: n.Column, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// result sorts the problems by position and keeps the first maxErrors.
func (d *decoder) result() error {
	if len(d.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	if len(d.errs) > maxErrors {
		next := d.errs[maxErrors]
		more := &Error{File: d.file, Line: next.Line, Column: next.Column,
			Msg: fmt.Sprintf("too many problems: %d more not shown", len(d.errs)-maxErrors)}
		d.errs = append(d.errs[:maxErrors:maxErrors], more)
	}
	return d.errs
}

// plain refuses what makes YAML more than a tree of plain values: anchors,
// aliases and explicit tags.
func (d *decoder) plain(n *yaml.Node, field string) bool {
	switch {
	case n.Kind == yaml.AliasNode:
		d.fail(n, field, "an alias (*%s): anchors and aliases are not allowed; write the value out", n.Value)
	case n.Anchor != "":
		d.fail(n, field, "an anchor (&%s): anchors and aliases are not allowed; write the value out", n.Anchor)
	case n.Style&yaml.TaggedStyle != 0:
		d.fail(n, field, "a tag (%s): tags are not allowed; quote a value to make it a string", n.Tag)
	default:
		return true
	}
	return false
}

// describe names a node's value for a message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!str":
		s := n.Value
		if len(s) > 40 {
			s = s[:37] + "..."
		}
		return fmt.Sprintf("the string %q", s)
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	case "!!null":
		if n.Value == "" {
			return "an empty value, which YAML reads as null"
		}
		return "null"
	case "!!timestamp":
		return "the timestamp " + n.Value
	}
	return "a value tagged " + n.ShortTag()
}

// wrong reports a value of the wrong type.
func (d *decoder) wrong(n *yaml.Node, field, want string) {
	msg := fmt.Sprintf("must be %s, not %s", want, describe(n))
	if n.Kind == yaml.ScalarNode && want == "a string" {
		switch n.ShortTag() {
		case "!!null":
			if n.Value == "" {
				msg += `; write "" for an empty string`
			}
		default:
			msg += fmt.Sprintf("; quote it: %q", n.Value)
		}
	}
	d.fail(n, field, "%s", msg)
}

// field is one key and its value in a mapping.
type field struct{ key, value *yaml.Node }

// bareKey: a key written in a field path as it is, [A-Za-z0-9_-]+. By
// hand, not by a regexp: every field of every resource has its path
// joined, and the regexp was a sixth of parsing 10,000 files.
func bareKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// join appends a key to a field path, quoting a key that is not a bare name.
func join(path, key string) string {
	if !bareKey(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// fields reads a mapping's keys, refusing keys given twice and keys not in
// known, and returns the rest by name.
func (d *decoder) fields(m *yaml.Node, path string, known []string) map[string]field {
	out := make(map[string]field, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if !d.plain(k, path) {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "a key must be a name, not %s", describe(k))
			continue
		}
		p := join(path, k.Value)
		if prev, ok := out[k.Value]; ok {
			d.fail(k, p, "given twice; first at line %d", prev.key.Line)
			continue
		}
		if !slices.Contains(known, k.Value) {
			d.fail(k, p, "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		out[k.Value] = field{k, v}
	}
	return out
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if !d.plain(n, path) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.wrong(n, path, "a string")
		return "", false
	}
	return n.Value, true
}

// located is where a resource's key (its path or name) was declared.
type located struct {
	index        int
	line, column int
}

// document decodes a whole declaration from the root of a document.
func (d *decoder) document(root *yaml.Node) *Declaration {
	if !d.plain(root, "") {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		d.fail(root, "", "a declaration is a mapping of %s, not %s", allOf(documentFields), describe(root))
		return nil
	}
	decl := &Declaration{where: map[string]located{}}
	fs := d.fields(root, "", documentFields)
	for _, name := range documentFields {
		f, ok := fs[name]
		if !ok {
			if slices.Contains(requiredFields, name) {
				d.fail(root, name, "required field is missing")
			}
			continue
		}
		switch name {
		case "mesh", "node":
			s, ok := d.str(f.value, name)
			if !ok {
				continue
			}
			if s == "" {
				d.fail(f.value, name, "must not be empty")
			}
			if !d.sizeOK(f.value, name, nameLimit, s) {
				continue
			}
			if name == "mesh" {
				decl.Mesh = s
			} else {
				decl.Node = s
			}
		case "revision":
			decl.Revision = d.revision(f.value)
		case "resources":
			if d.chunked != nil {
				d.resourcesInChunks(f.key, f.value, decl)
			} else {
				d.resources(f.value, decl)
			}
			d.checkRelations(decl)
		}
	}
	return decl
}

func (d *decoder) revision(n *yaml.Node) uint64 {
	const field = "revision"
	if !d.plain(n, field) {
		return 0
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.wrong(n, field, "a whole number of at least 1")
		return 0
	}
	r, err := strconv.ParseUint(n.Value, 10, 64)
	switch {
	case strings.HasPrefix(n.Value, "-") || err == nil && r == 0:
		d.fail(n, field, "must be at least 1, not %s", n.Value)
	case errors.Is(err, strconv.ErrRange):
		d.fail(n, field, "%s is too large", n.Value)
	case err != nil:
		d.fail(n, field, "must be written in decimal, not %s", n.Value)
	}
	return r
}

func (d *decoder) resources(n *yaml.Node, decl *Declaration) {
	const field = "resources"
	if !d.plain(n, field) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.wrong(n, field, "a list of resources")
		return
	}
	if len(n.Content) > d.most {
		d.tooMany(n.Content[d.most])
		return
	}
	c := d.claims(decl, len(n.Content))
	for i, e := range n.Content {
		c.add(i, e)
	}
}

// tooMany refuses a list of resources whose entry e is one more than the
// limit.
func (d *decoder) tooMany(e *yaml.Node) {
	d.errs = append(d.errs, &Error{File: d.file, Line: e.Line, Column: e.Column, Field: fmt.Sprintf("resources[%d]", d.most),
		Msg: fmt.Sprintf("one resource more than %s: %d", limitResources, d.most), sentinel: ErrLimit})
}

// resourcesInChunks decodes the resources list found by listOf, a chunk
// at a time; key is the head's resources key, which must be where the
// list was found, and n what the head holds for it, which must be
// nothing. Any problem is a failure: the whole parse then says what it
// is.
//
// A list of more entries than the limit is refused as the whole parse
// refuses it, once the chunks up to the entry one past the limit, and the
// list's last chunk, have parsed, each as a list of exactly the entries
// found: the entries between are never parsed, and no chunk is decoded.
// What only they could show (a syntax error) is not reported: the limit
// is. That is the only use of a
// list in flow style (flowListOf): one within the limit is parsed whole.
func (d *decoder) resourcesInChunks(key, n *yaml.Node, decl *Declaration) {
	const field = "resources"
	l := d.chunked
	if key.Line != l.keyLine || key.Column != l.keyColumn {
		d.fail(n, field, "not the key found")
		return
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!null" || n.Value != "" || n.Style != 0 || n.Anchor != "" {
		d.fail(n, field, "not the list found")
		return
	}
	if len(l.items) > d.most {
		var past *yaml.Node
		err := l.chunks(d.most+1, func(first int, entries []*yaml.Node) {
			if i := d.most - first; i < len(entries) {
				past = entries[i]
			}
		})
		// The list's last chunk too, which ends where the head goes on:
		// the head's errors are the whole parse's only if the list ends
		// where it was found to.
		if last := (len(l.items) - 1) / chunkItems; err == nil && last*chunkItems > d.most {
			err = l.parse(last).err
		}
		if err != nil || past == nil {
			d.fail(n, field, "the list did not parse as found: %v", err)
			return
		}
		d.tooMany(past)
		d.refused = true
		return
	}
	if l.flow {
		d.fail(n, field, "a list in flow style within the limit is parsed whole")
		return
	}
	c := d.claims(decl, len(l.items))
	err := l.chunks(len(l.items), func(first int, entries []*yaml.Node) {
		for j, e := range entries {
			c.add(first+j, e)
		}
	})
	if err != nil {
		d.fail(n, field, "%v", err)
	}
}

// claims decodes a declaration's resources one entry at a time, refusing
// two that claim one thing.
type claims struct {
	d    *decoder
	decl *Declaration
	// claimed holds, by identity, the first resource to claim it: its
	// ID for packages and units, its expanded path for the kinds that
	// take a path, since a file and a directory cannot share one either.
	claimed map[string]claim
}

type claim struct {
	kind drivers.Kind
	id   string
	line int
}

func (d *decoder) claims(decl *Declaration, n int) *claims {
	decl.Resources = make([]drivers.Spec, 0, n)
	return &claims{d: d, decl: decl, claimed: make(map[string]claim, n)}
}

// add decodes entry i, e.
func (c *claims) add(i int, e *yaml.Node) {
	d, decl := c.d, c.decl
	path := fmt.Sprintf("resources[%d]", i)
	spec, key, keyPath := d.resource(e, path)
	if spec == nil {
		return
	}
	decl.Resources = append(decl.Resources, spec)
	if key == nil {
		return
	}
	id := drivers.ID(spec)
	if _, ok := decl.where[id]; !ok {
		decl.where[id] = located{len(decl.Resources) - 1, key.Line, key.Column}
	}
	identity := id
	switch spec.(type) {
	case *drivers.FileSpec, *drivers.DirectorySpec, *drivers.ArchiveSpec:
		identity = "path:" + expand(spec).Key()
	}
	first, dup := c.claimed[identity]
	switch {
	case !dup:
		c.claimed[identity] = claim{spec.Kind(), id, key.Line}
	case first.kind == spec.Kind():
		d.fail(key, keyPath, "duplicate resource %q: also declared at line %d", id, first.line)
	default:
		d.fail(key, keyPath, "%q is also declared at line %d, as %s %s", spec.Key(), first.line, article(string(first.kind)), first.kind)
	}
}

// resource decodes one entry of resources. It returns the spec, or nil if
// the entry is too wrong to make one, and the node of the spec's key and
// its field path, or nil if the key itself is wrong.
func (d *decoder) resource(e *yaml.Node, path string) (drivers.Spec, *yaml.Node, string) {
	if !d.plain(e, path) {
		return nil, nil, ""
	}
	if e.Kind != yaml.MappingNode {
		d.fail(e, path, "must be a mapping with one key, the kind (%s), not %s", strings.Join(kindNames(), ", "), describe(e))
		return nil, nil, ""
	}
	switch len(e.Content) / 2 {
	case 0:
		d.fail(e, path, "is empty: an entry has one key, the kind (%s)", strings.Join(kindNames(), ", "))
		return nil, nil, ""
	case 1:
	default:
		d.manyKeys(e, path)
		return nil, nil, ""
	}
	k, v := e.Content[0], e.Content[1]
	if !d.plain(k, path) {
		return nil, nil, ""
	}
	kd, ok := lookupKind(k.Value)
	if k.Kind != yaml.ScalarNode || !ok {
		d.fail(k, join(path, k.Value), "unknown kind (known: %s)", strings.Join(kindNames(), ", "))
		return nil, nil, ""
	}
	return d.spec(kd, v, join(path, k.Value))
}

// manyKeys reports an entry with more than one key, guessing why.
func (d *decoder) manyKeys(e *yaml.Node, path string) {
	var keys []string
	for i := 0; i < len(e.Content); i += 2 {
		keys = append(keys, e.Content[i].Value)
	}
	msg := fmt.Sprintf("has %d keys (%s); an entry has exactly one, the kind", len(keys), strings.Join(keys, ", "))
	kd, isKind := lookupKind(keys[0])
	allFields, allKinds := isKind, true
	for _, key := range keys[1:] {
		if _, ok := kd.field(key); !ok {
			allFields = false
		}
		if _, ok := lookupKind(key); !ok {
			allKinds = false
		}
	}
	switch {
	case allFields:
		msg += fmt.Sprintf(": indent %s under %s", strings.Join(keys[1:], ", "), keys[0])
	case allKinds:
		msg += `: start each resource with its own "-"`
	default:
		msg += fmt.Sprintf(" (%s)", strings.Join(kindNames(), ", "))
	}
	d.fail(e.Content[2], path, "%s", msg)
}

// spec decodes a kind's spec from its mapping, by the spec struct's fields.
func (d *decoder) spec(kd kind, n *yaml.Node, path string) (drivers.Spec, *yaml.Node, string) {
	if !d.plain(n, path) {
		return nil, nil, ""
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping of the %s's fields (%s), not %s", kd.kind, strings.Join(kd.fieldNames(), ", "), describe(n))
		return nil, nil, ""
	}
	ptr := reflect.New(kd.typ)
	spec := ptr.Interface().(drivers.Spec)
	fs := d.fields(n, path, kd.fieldNames())
	keyName := "path"
	switch kd.kind {
	case drivers.KindPackage, drivers.KindUnit, drivers.KindExec, drivers.KindUser, drivers.KindGroup:
		keyName = "name"
	}
	var key *yaml.Node
	for _, sf := range kd.fields {
		fpath := join(path, sf.name)
		f, ok := fs[sf.name]
		if !ok {
			_, secret := fs["secret"]
			switch {
			case sf.required && sf.name == "content" && kd.kind == drivers.KindFile && secret:
				// The secret is the content.
			case sf.required && sf.name == "content" && kd.kind == drivers.KindFile:
				d.fail(n, fpath, `required field is missing (content: "" declares an empty file)`)
			case sf.required:
				d.fail(n, fpath, "required field is missing")
			case sf.rule.def != "":
				ptr.Elem().FieldByIndex(sf.index).SetString(sf.rule.def)
			}
			continue
		}
		if kd.kind == drivers.KindFile && sf.name == "content" && f.value.Kind == yaml.MappingNode {
			// content: {secret: NAME}, the way a person writes it.
			if _, both := fs["secret"]; both {
				d.fail(f.value, fpath, "a secret is given twice: as content and as secret")
				continue
			}
			sec := d.secretRef(f.value, fpath)
			if sec != nil {
				spec.(*drivers.FileSpec).Secret = sec
			}
			continue
		}
		if d.value(ptr.Elem().FieldByIndex(sf.index), sf, f.value, fpath) && sf.name == keyName {
			key = f.value
		}
	}
	if e, ok := spec.(*drivers.ExecSpec); ok && key != nil && e.Creates == "" && e.Unless == nil && e.OnlyIf == nil && !e.RefreshOnly {
		d.fail(n, path, "an exec must be idempotent by construction: give creates, unless, onlyif or refresh_only, "+
			"so that it runs when needed and not at every reconcile")
	}
	d.noteRelations(spec, fs, path)
	if fspec, ok := spec.(*drivers.FileSpec); ok {
		if fspec.Secret != nil && fspec.Content != "" {
			d.fail(fs["content"].value, join(path, "content"), "give content or a secret, not both")
		}
		d.specialBits(fs, path, fspec.Mode, fspec.SpecialBits)
	}
	if dspec, ok := spec.(*drivers.DirectorySpec); ok {
		d.specialBits(fs, path, dspec.Mode, dspec.SpecialBits)
	}
	return spec, key, join(path, keyName)
}

// specialBits refuses a mode that sets setuid, setgid or the sticky bit
// unless the resource says special_bits: true: a setuid file is a root
// shell for whoever runs it, and a setgid or sticky directory changes who
// owns what others put in it.
func (d *decoder) specialBits(fs map[string]field, path string, m *drivers.Mode, allowed bool) {
	if m != nil && *m&0o7000 != 0 && !allowed {
		d.fail(fs["mode"].value, join(path, "mode"), "%04o sets setuid, setgid or the sticky bit: say special_bits: true to mean it", uint32(*m))
	}
}

// secretRef decodes content: {secret: NAME}.
func (d *decoder) secretRef(n *yaml.Node, path string) *drivers.Secret {
	fs := d.fields(n, path, []string{"secret"})
	f, ok := fs["secret"]
	if !ok {
		d.fail(n, path, `must be a string, or {secret: NAME} for a secret's value`)
		return nil
	}
	name, ok := d.str(f.value, join(path, "secret"))
	if !ok {
		return nil
	}
	if !secretNameRegexp.MatchString(name) {
		d.fail(f.value, join(path, "secret"), "%q is not a secret's name: lower-case letters, digits, '.', '-' and '_', at most 63", name)
		return nil
	}
	return &drivers.Secret{Name: name}
}

// secret decodes the secret field: its name and, in a declaration a node
// receives, the sealed value and who sealed it.
func (d *decoder) secret(n *yaml.Node, path string) *drivers.Secret {
	if n.Kind != yaml.MappingNode {
		d.wrong(n, path, "a mapping of name, sealed and sender")
		return nil
	}
	fs := d.fields(n, path, []string{"name", "sealed", "sender"})
	out := &drivers.Secret{}
	good := true
	for _, c := range []struct {
		name string
		dst  *string
		re   *regexp.Regexp
		max  int
		what string
	}{
		{"name", &out.Name, secretNameRegexp, 63, "a secret's name: lower-case letters, digits, '.', '-' and '_'"},
		{"sealed", &out.Sealed, sealedRegexp, maxSealed, "a sealed value (base64url)"},
		{"sender", &out.Sender, curveKeyRegexp, 56, "a public sealing key (X…)"},
	} {
		f, ok := fs[c.name]
		if !ok {
			continue
		}
		v, ok := d.str(f.value, join(path, c.name))
		if !ok {
			good = false
			continue
		}
		if len(v) > c.max || !c.re.MatchString(v) {
			d.fail(f.value, join(path, c.name), "is not %s", c.what)
			good = false
			continue
		}
		*c.dst = v
	}
	if _, ok := fs["name"]; !ok {
		d.fail(n, join(path, "name"), "required field is missing")
		return nil
	}
	if (out.Sealed == "") != (out.Sender == "") && good {
		d.fail(n, path, "sealed and sender go together")
		return nil
	}
	if !good {
		return nil
	}
	return out
}

// value decodes one field's value into dst and checks it against the
// field's rule; it reports whether the value is good.
func (d *decoder) value(dst reflect.Value, sf specField, n *yaml.Node, path string) bool {
	if !d.plain(n, path) {
		return false
	}
	switch {
	case sf.typ.Kind() == reflect.String:
		s, ok := d.str(n, path)
		if !ok {
			return false
		}
		if !d.sizeOK(n, path, sf.rule.limit, s) {
			return false
		}
		if p := sf.rule.problem(s); p != "" {
			d.fail(n, path, "%s", p)
			return false
		}
		dst.SetString(s)
	case sf.typ.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(n.Value)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || err != nil {
			d.wrong(n, path, "true or false")
			return false
		}
		dst.SetBool(b)
	case sf.typ == stringsType:
		list, ok := d.strings(n, sf, path)
		if !ok {
			return false
		}
		dst.Set(reflect.ValueOf(list))
	case sf.typ == intsType:
		list, ok := d.ints(n, sf, path)
		if !ok {
			return false
		}
		dst.Set(reflect.ValueOf(list))
	case sf.typ == intPtrType:
		v, err := strconv.Atoi(n.Value)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || err != nil {
			d.wrong(n, path, fmt.Sprintf("a whole number from %d to %d", sf.rule.min, sf.rule.max))
			return false
		}
		if v < sf.rule.min || v > sf.rule.max {
			d.fail(n, path, "%d is not from %d to %d", v, sf.rule.min, sf.rule.max)
			return false
		}
		if p := sf.rule.check(n.Value); p != "" {
			d.fail(n, path, "%s", p)
			return false
		}
		dst.Set(reflect.ValueOf(&v))
	case sf.typ == secretType && n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[0].Value == "secret":
		// {secret: NAME}, the way a person names a secret.
		sec := d.secretRef(n, path)
		if sec == nil {
			return false
		}
		dst.Set(reflect.ValueOf(sec))
	case sf.typ == secretType && n.Kind != yaml.MappingNode && sf.name == "password":
		d.fail(n, path, "must be {secret: NAME}, not %s: a password's hash is a secret, never written in a declaration", describe(n))
		return false
	case sf.typ == secretType:
		sec := d.secret(n, path)
		if sec == nil {
			return false
		}
		dst.Set(reflect.ValueOf(sec))
	case sf.typ == modeType:
		if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
			d.fail(n, path, "must be an octal string such as \"0644\", not the number %s: quote it", n.Value)
			return false
		}
		s, ok := d.str(n, path)
		if !ok {
			return false
		}
		if p := sf.rule.problem(s); p != "" {
			d.fail(n, path, "%s", p)
			return false
		}
		m, _ := drivers.ParseMode(s) // checked by the rule
		dst.Set(reflect.ValueOf(&m))
	default:
		// TestRulesCoverFields keeps this from happening: a new field
		// type in package drivers needs a case here.
		d.fail(n, path, "cannot decode a field of type %s", sf.typ)
		return false
	}
	return true
}

// items checks that n is a list within the rule's bounds.
func (d *decoder) items(n *yaml.Node, sf specField, path, what string) bool {
	if n.Kind != yaml.SequenceNode {
		d.wrong(n, path, "a list of "+what)
		return false
	}
	switch {
	case len(n.Content) == 0 && sf.rule.nonEmpty:
		d.fail(n, path, "must not be empty")
		return false
	case sf.rule.maxItems > 0 && len(n.Content) > sf.rule.maxItems:
		e := n.Content[sf.rule.maxItems]
		d.errs = append(d.errs, &Error{File: d.file, Line: e.Line, Column: e.Column, Field: fmt.Sprintf("%s[%d]", path, sf.rule.maxItems), sentinel: ErrLimit,
			Msg: fmt.Sprintf("one item more than %s: %d", limitItems, sf.rule.maxItems)})
		return false
	}
	return true
}

// strings decodes a list of strings, each held to the field's rule.
func (d *decoder) strings(n *yaml.Node, sf specField, path string) ([]string, bool) {
	if !d.items(n, sf, path, "strings") {
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	good := true
	for i, e := range n.Content {
		epath := fmt.Sprintf("%s[%d]", path, i)
		v, ok := d.str(e, epath)
		if !ok || !d.sizeOK(e, epath, sf.rule.limit, v) {
			good = false
			continue
		}
		r := sf.rule
		r.nonEmpty = true // an empty word, guard or ID is a slip
		if p := r.problem(v); p != "" {
			d.fail(e, epath, "%s", p)
			good = false
			continue
		}
		out = append(out, v)
	}
	return out, good
}

// ints decodes a list of whole numbers between the rule's min and max.
func (d *decoder) ints(n *yaml.Node, sf specField, path string) ([]int, bool) {
	if !d.items(n, sf, path, "whole numbers") {
		return nil, false
	}
	out := make([]int, 0, len(n.Content))
	good := true
	for i, e := range n.Content {
		epath := fmt.Sprintf("%s[%d]", path, i)
		if !d.plain(e, epath) {
			good = false
			continue
		}
		v, err := strconv.Atoi(e.Value)
		if e.Kind != yaml.ScalarNode || e.ShortTag() != "!!int" || err != nil {
			d.wrong(e, epath, fmt.Sprintf("a whole number from %d to %d", sf.rule.min, sf.rule.max))
			good = false
			continue
		}
		if v < sf.rule.min || v > sf.rule.max {
			d.fail(e, epath, "%d is not from %d to %d", v, sf.rule.min, sf.rule.max)
			good = false
			continue
		}
		out = append(out, v)
	}
	return out, good
}
