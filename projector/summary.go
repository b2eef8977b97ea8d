package projector

import (
	"encoding/json"
	"fmt"
)

// LoadSummary reads the stored State's core and its Desired's revision,
// digest and seq: none of the declaration's resources or document, and no
// owned resource (State.Owned is nil; walk them with EachOwned). It is what
// a glance at the host needs (the metrics' gauges, read at every scrape
// that finds the journal moved), where LoadCore decodes a line for every
// resource declared. Unlike LoadCore it reads and checks only what it
// returns.
func LoadSummary(r Reader) (State, error) {
	sealed, err := layout(r)
	if err != nil {
		return State{}, err
	}
	var s State
	core, err := get(r, keyCore, sealed)
	if err != nil {
		return State{}, err
	}
	if sealed && core == nil {
		return State{}, errNoCore
	}
	if len(core) > 0 {
		if err := json.Unmarshal(core, &s); err != nil {
			return State{}, fmt.Errorf("%w: core: %w", ErrCorrupt, err)
		}
	}
	s.Desired, s.Owned = nil, nil
	if s.Desired, err = loadDesiredRef(r, sealed); err != nil {
		return State{}, err
	}
	s.normalise()
	return s, nil
}
