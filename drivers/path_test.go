package drivers_test

import (
	"errors"
	"testing"

	"github.com/mesh-host/mesh-host/drivers"
)

func TestCheckPath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/etc/motd", true},
		{"/etc", true},
		{"/a/b/c.d", true},
		{"/etc/..hidden", true},
		{"", false},
		{"etc/motd", false},
		{"./etc/motd", false},
		{"/", false},
		{"//", false},
		{"/etc/", false},
		{"/etc//motd", false},
		{"/etc/./motd", false},
		{"/etc/../motd", false},
		{"/..", false},
		{"/../etc", false},
		{"/etc/mo\x00td", false},
	}
	for _, tt := range tests {
		err := drivers.CheckPath(tt.path)
		if tt.ok && err != nil {
			t.Errorf("CheckPath(%q): got %v, want nil", tt.path, err)
		}
		if !tt.ok && !errors.Is(err, drivers.ErrUnsafePath) {
			t.Errorf("CheckPath(%q): got %v, want an error wrapping ErrUnsafePath", tt.path, err)
		}
	}
}
