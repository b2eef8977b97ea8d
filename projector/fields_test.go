package projector

import (
	"reflect"
	"testing"
	"time"
)

// The comparisons in diff.go and the copy in Clone are written field by
// field, so a field added to State (or to a struct it holds) is missed
// until someone remembers it there. These tests cannot miss one: they find
// every leaf of State by reflection, change each in turn, and require Equal
// and Diff to see it and Clone to copy it.

// filler sets every leaf of a value it walks: maps get one entry, slices
// one element, pointers a value. Leaf number alter (in walk order) gets a
// second value; every other leaf its first. A map's key counts as a leaf
// of its own.
type filler struct {
	alter int
	n     int // leaves seen so far
	path  []string
	// altered is the path of the leaf that got its second value.
	altered string
}

func (f *filler) leaf() (second bool) {
	second = f.n == f.alter
	if second {
		f.altered = joinPath(f.path)
	}
	f.n++
	return second
}

func joinPath(p []string) string {
	s := ""
	for _, e := range p {
		s += e
	}
	return s
}

var timeType = reflect.TypeFor[time.Time]()

func (f *filler) fill(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		t := time.Unix(1_700_000_000, 0)
		if f.leaf() {
			t = t.Add(time.Second)
		}
		v.Set(reflect.ValueOf(t))
		return
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8:
		b := []byte("one")
		if f.leaf() {
			b = []byte("two")
		}
		v.SetBytes(b)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue
			}
			f.path = append(f.path, "."+v.Type().Field(i).Name)
			f.fill(v.Field(i))
			f.path = f.path[:len(f.path)-1]
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		f.path = append(f.path, "[0]")
		f.fill(v.Index(0))
		f.path = f.path[:len(f.path)-1]
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		key := reflect.New(v.Type().Key()).Elem()
		f.path = append(f.path, "{key}")
		f.fill(key)
		f.path[len(f.path)-1] = "[k]"
		val := reflect.New(v.Type().Elem()).Elem()
		f.fill(val)
		f.path = f.path[:len(f.path)-1]
		m.SetMapIndex(key, val)
		v.Set(m)
	case reflect.String:
		s := "one"
		if f.leaf() {
			s = "two"
		}
		v.SetString(s)
	case reflect.Bool:
		// The first value of a bool is true, so that the second (false)
		// is a change an omitempty field would hide from a JSON
		// comparison.
		v.SetBool(!f.leaf())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := int64(1)
		if f.leaf() {
			n = 2
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n := uint64(1)
		if f.leaf() {
			n = 2
		}
		v.SetUint(n)
	default:
		panic("fields_test: no filler for " + v.Type().String() + " at " + joinPath(f.path))
	}
}

// filledState returns a State with every leaf set, leaf number alter set
// differently, and the path of that leaf ("" when alter is out of range).
func filledState(alter int) (State, string, int) {
	var s State
	f := filler{alter: alter}
	f.fill(reflect.ValueOf(&s).Elem())
	return s, f.altered, f.n
}

func TestEqualSeesEveryField(t *testing.T) {
	base, _, leaves := filledState(-1)
	if leaves < 50 {
		t.Fatalf("found %d leaves in State; the walk is broken", leaves)
	}
	if !Equal(base, base) {
		t.Fatal("a filled State is not Equal to itself")
	}
	for i := range leaves {
		other, path, _ := filledState(i)
		if Equal(base, other) {
			t.Errorf("Equal misses a change to %s", path)
		}
		if d := Diff(base, other); len(d) == 0 {
			t.Errorf("Diff misses a change to %s", path)
		}
	}
}

func TestCloneCopiesEveryField(t *testing.T) {
	_, _, leaves := filledState(-1)
	for i := range leaves {
		s, _, _ := filledState(-1)
		c := s.Clone()
		// Change leaf i in the clone alone, through its own maps and
		// slices: the original must not see it.
		altered, path, _ := filledState(i)
		overwrite(reflect.ValueOf(&c).Elem(), reflect.ValueOf(altered))
		if want, _, _ := filledState(-1); !Equal(s, want) {
			t.Errorf("changing %s in a clone changed the original", path)
		}
		if !Equal(c, altered) {
			t.Errorf("overwrite did not reach %s", path)
		}
	}
}

// overwrite writes src's leaves into dst in place, through dst's own
// pointers, maps and slices, so that any of them shared with another State
// shows the write there.
func overwrite(dst, src reflect.Value) {
	switch {
	case dst.Type() == timeType:
		dst.Set(src)
		return
	}
	switch dst.Kind() {
	case reflect.Struct:
		for i := range dst.NumField() {
			if dst.Type().Field(i).IsExported() {
				overwrite(dst.Field(i), src.Field(i))
			}
		}
	case reflect.Pointer:
		overwrite(dst.Elem(), src.Elem())
	case reflect.Slice:
		if dst.Type().Elem().Kind() == reflect.Uint8 {
			reflect.Copy(dst, src) // same length: "one", "two"
			return
		}
		for i := range dst.Len() {
			overwrite(dst.Index(i), src.Index(i))
		}
	case reflect.Map:
		// A map holds its values by copy, so an entry is replaced whole;
		// a slice inside it is written in place first.
		for _, k := range dst.MapKeys() {
			v := reflect.New(dst.Type().Elem()).Elem()
			v.Set(dst.MapIndex(k))
			sk := src.MapKeys()[0]
			overwrite(v, src.MapIndex(sk))
			if !k.Equal(sk) {
				dst.SetMapIndex(k, reflect.Value{})
			}
			dst.SetMapIndex(sk, v)
		}
	default:
		dst.Set(src)
	}
}
