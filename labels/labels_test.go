package labels

import (
	"errors"
	"strings"
	"testing"
)

func TestSelector(t *testing.T) {
	web := Set{"role": "web", "dc": "fra"}
	canary := Set{"role": "web", "dc": "ams", "canary": ""}
	db := Set{"role": "db", "dc": "lon"}
	none := Set{}
	for _, c := range []struct {
		sel  string
		want []bool // web, canary, db, none
	}{
		{"", []bool{true, true, true, true}},
		{"role=web", []bool{true, true, false, false}},
		{"role==web", []bool{true, true, false, false}},
		{"role!=web", []bool{false, false, true, true}},
		{"dc in (fra,ams)", []bool{true, true, false, false}},
		{"dc in ( fra , ams )", []bool{true, true, false, false}},
		{"dc notin (fra,ams)", []bool{false, false, true, true}},
		{"canary", []bool{false, true, false, false}},
		{"!canary", []bool{true, false, true, true}},
		{"role=web,dc in (fra,ams),!canary", []bool{true, false, false, false}},
		{" role = web , ! canary ", []bool{true, false, false, false}},
		{"canary=", []bool{false, true, false, false}},
	} {
		s, err := Parse(c.sel)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.sel, err)
			continue
		}
		for i, set := range []Set{web, canary, db, none} {
			if got := s.Matches(set); got != c.want[i] {
				t.Errorf("%q matches %v = %t, want %t", c.sel, set, got, c.want[i])
			}
		}
	}
}

func TestSelectorRefused(t *testing.T) {
	for _, c := range []struct{ sel, want string }{
		{"role=web,", "at 10: want a label key"},
		{"role=web dc=fra", "at 10: want a comma between requirements"},
		{"Role=web", "key \"Role\""},
		{"dc in fra", "at 7: want ( after in or notin"},
		{"dc in (fra ams)", "want a comma or ) in the set"},
		{"dc in (fra,", "want a comma or ) in the set, got the end"},
		{"role=web!", "want a comma"},
		{"=web", "at 1: want a label key"},
		{"role=" + strings.Repeat("x", 64), "value"},
		{strings.Repeat("a,", 3000), "over 4096"},
	} {
		_, err := Parse(c.sel)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid saying %q", c.sel, err, c.want)
		}
	}
}

func TestApply(t *testing.T) {
	s, err := Set{"role": "web", "old": "x"}.Apply([]string{"dc=fra", "old-", "role=db"})
	if err != nil || s.String() != "dc=fra,role=db" {
		t.Errorf("Apply = %v, %v", s, err)
	}
	for _, bad := range [][]string{{"dc"}, {"DC=fra"}, {"dc=fr a"}, {"-"}, {"x=" + strings.Repeat("v", 64)}} {
		if _, err := (Set{}).Apply(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Apply(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	distinct := make([]string, MaxPerNode+1)
	for i := range distinct {
		distinct[i] = "k" + strings.Repeat("a", i/26) + string(rune('a'+i%26)) + "=v"
	}
	if _, err := (Set{}).Apply(distinct); !errors.Is(err, ErrInvalid) {
		t.Errorf("Apply of %d labels = %v, want refused", MaxPerNode+1, err)
	}
}

// FuzzParse: whatever the text, Parse returns or refuses, never panics,
// and a selector it reads keeps its text.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"role=web,dc in (fra,ams),!canary", "a!=b", "x notin (y)", "k", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(text)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q): %v, not ErrInvalid", text, err)
			}
			return
		}
		if s.String() != text {
			t.Fatalf("String() = %q, want %q", s.String(), text)
		}
		s.Matches(Set{"a": "b"})
	})
}
