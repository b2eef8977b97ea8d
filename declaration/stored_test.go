package declaration

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// DecodeStored reads back what MarshalJSON stored, for every example.
func TestDecodeStoredRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ParseYAML(f, data)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := d.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeStored(stored)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if got.Digest() != d.Digest() || len(got.Resources) != len(d.Resources) {
			t.Errorf("%s: got digest %s with %d resources, want %s with %d", f, got.Digest(), len(got.Resources), d.Digest(), len(d.Resources))
		}
	}
}

func TestDecodeStoredRefusesMalformed(t *testing.T) {
	for _, in := range []string{`{`, `{"resources":[{"file":{},"unit":{}}]}`, `{"resources":[{"socket":{}}]}`, `{"resources":[{"file":{"mode":644}}]}`} {
		if _, err := DecodeStored([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("DecodeStored(%s): got %v, want ErrInvalid", in, err)
		}
	}
}
