package projector

import (
	"encoding/json"
	"fmt"
)

// LoadLocal reads the local override in force from the stored State (nil
// for none), reading the core alone: admission asks it of every push.
func LoadLocal(r Reader) (*LocalOverride, error) {
	sealed, err := layout(r)
	if err != nil {
		return nil, err
	}
	core, err := get(r, keyCore, sealed)
	if err != nil || len(core) == 0 {
		return nil, err
	}
	var s struct {
		Local *LocalOverride `json:"local"`
	}
	if err := json.Unmarshal(core, &s); err != nil {
		return nil, fmt.Errorf("%w: core: %w", ErrCorrupt, err)
	}
	if s.Local != nil {
		s.Local.At = s.Local.At.UTC()
	}
	return s.Local, nil
}
