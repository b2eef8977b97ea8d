package control

import "testing"

func TestParseMaxInFlight(t *testing.T) {
	cases := []struct {
		in    string
		total int
		want  int
		bad   bool
	}{
		{"", 40, 40, false},
		{"", 0, 1, false},
		{"5", 40, 5, false},
		{"25%", 40, 10, false},
		{"1%", 40, 1, false}, // at least one node
		{"100%", 7, 7, false},
		{"0", 40, 0, true},
		{"-3", 40, 0, true},
		{"0%", 40, 0, true},
		{"101%", 40, 0, true},
		{"ten", 40, 0, true},
	}
	for _, c := range cases {
		got, err := ParseMaxInFlight(c.in, c.total)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("ParseMaxInFlight(%q, %d) = %d, %v; want %d, error %v", c.in, c.total, got, err, c.want, c.bad)
		}
	}
}
