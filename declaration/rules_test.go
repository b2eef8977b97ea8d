package declaration

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/drivers"
)

// TestRulesCoverFields holds the rules to the spec types of package
// drivers: a field added there needs a rule (and a decoder case) here.
func TestRulesCoverFields(t *testing.T) {
	for _, k := range kinds {
		var names []string
		for _, f := range k.fields {
			names = append(names, f.name)
			if f.rule.desc == "" {
				t.Errorf("%s.%s: no rule", k.kind, f.name)
			}
			if f.typ.Kind() != reflect.String && f.typ.Kind() != reflect.Bool && f.typ != modeType && f.typ != secretType &&
				f.typ != stringsType && f.typ != intsType && f.typ != intPtrType {
				t.Errorf("%s.%s: type %s has no decoder", k.kind, f.name, f.typ)
			}
		}
		for name := range rules[k.kind] {
			if !slices.Contains(names, name) {
				t.Errorf("%s.%s: a rule for no field", k.kind, name)
			}
		}
		if got := reflect.New(k.typ).Interface().(drivers.Spec).Kind(); got != k.kind {
			t.Errorf("got kind %s for %s, want %s", got, k.typ, k.kind)
		}
	}
	if len(rules) != len(kinds) {
		t.Errorf("got rules for %d kinds, want %d", len(rules), len(kinds))
	}
}

// TestPatternsAgree: the pattern each rule gives the schema accepts a
// value exactly when the parser's check does.
func TestPatternsAgree(t *testing.T) {
	values := map[string][]string{
		pathPattern: {"/a", "/etc/app/app.conf", "/a b/c", "/.hidden", "/..x", "/a...", "/x/y.z",
			"", "/", "a", "./a", "/a/", "//a", "/a//b", "/a/.", "/a/..", "/./a", "/../a", "/a/../b", "/a\x00b", "/.", "/.."},
		modePattern:    {"644", "0644", "4755", "7777", "000", "", "7", "64", "10644", "0999", "0o644", "+644", "-644", " 644", "644\n", "12345"},
		digestPattern:  {"sha256:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("A", 64), "sha256:", "", "sha256:" + strings.Repeat("0", 63), "sha256:" + strings.Repeat("0", 65), "md5:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("0", 63) + "g"},
		sourcePattern:  {"file:///a", "https://h/x", "http://h:8080/x?y#z", "file://h/a", "file:/a", "FILE:///a", "Https://h/a", "file:///a b", "ftp://h/a", "https:///a", "https://", "/a", "", "https://h/${version}"},
		packagePattern: {"nginx", "libstdc++6", "python3.12", "0ad", "g++", "Nginx", "-x", "+x", ".x", "a_b", "a b", ""},
		unitPattern: {"app.service", "getty@tty1.service", "a.socket", "b.timer", "multi-user.target", "c.path", "srv-data.mount", "x\\x2d.service",
			"app", ".service", "a/b.service", "a b.service", "app.conf", "", "app.service.d"},
		namePattern: {"root", "www-data", "adm", "1000", "root:adm", "a/b", ""},
		relationPattern: {"file:/etc/motd", "unit:app.service", "exec:migrate", "package:nginx", "directory:/srv", "archive:/srv/${version}",
			"file:", "/etc/motd", "service:nginx", "File:/etc/motd", "unit", ":x", ""},
		execNamePattern: {"migrate", "db-migrate.v2", "a@b", "0x", "_x", "-x", ".x", "a/b", "a b", "a:b", ""},
		envPattern:      {"A=1", "_X=", "PATH=/bin:/usr/bin", "a_b9=c=d", "1X=2", "X", "=x", "A-B=1", " A=1", ""},
		accountPattern:  {"shop", "www-data", "_apt", "a1", "machine$", "Shop", "1shop", "-x", "a b", "a:b", "", strings.Repeat("a", 33), strings.Repeat("a", 32)},
	}
	// ${version} is refused in a file's or a directory's path, which the
	// schema does not say; it is checked in testdata/bad.
	if p := rules[drivers.KindArchive]["path"].problem("/opt/${version}"); p != "" {
		t.Errorf("got %q for an archive path with ${version}, want none", p)
	}
	for _, byField := range rules {
		for name, r := range byField {
			if r.pattern == "" {
				continue
			}
			samples, ok := values[r.pattern]
			if !ok {
				t.Errorf("%s: no samples for pattern %s", name, r.pattern)
				continue
			}
			re := regexp.MustCompile(r.pattern)
			for _, v := range samples {
				matches := re.MatchString(v)
				var passes bool
				if r.check != nil {
					passes = v != "" && r.check(v) == ""
				} else {
					passes = r.problem(v) == ""
				}
				if matches != passes {
					t.Errorf("%s: %q: got pattern %v, check %v (%q), want them to agree", name, v, matches, passes, r.problem(v))
				}
			}
		}
	}
}

// TestRelationKindsAreTheKinds: the kinds a relation may name, written
// out where the kinds cannot be read (they are built from these rules),
// are the kinds.
func TestRelationKindsAreTheKinds(t *testing.T) {
	if !slices.Equal(relationKinds, kindNames()) {
		t.Errorf("relations name kinds %v, the parser knows %v", relationKinds, kindNames())
	}
	for _, k := range kindNames() {
		if !regexp.MustCompile(relationPattern).MatchString(k + ":x") {
			t.Errorf("the relation pattern refuses kind %s", k)
		}
	}
}
