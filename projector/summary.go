package projector

import (
	"bytes"
	"fmt"
	"hash/crc32"

	"github.com/mesh-host/mesh-host/journal/event"
)

// LoadSummary reads the stored State's core and its Desired's revision,
// digest and seq: none of the declaration's resources or document, and no
// owned resource (State.Owned is nil; walk them with EachOwned). It is what
// a glance at the host needs (the metrics' gauges, read at every scrape
// that finds the journal moved), where LoadCore decodes a line for every
// resource declared. Unlike LoadCore it reads and checks only what it
// returns.
func LoadSummary(r Reader) (State, error) {
	s, sealed, err := loadCoreOnly(r)
	if err != nil {
		return State{}, err
	}
	if s.Desired, err = loadDesiredRef(r, sealed); err != nil {
		return State{}, err
	}
	s.normalise()
	return s, nil
}

// OwnedCounts is how many resources a stored State owns, and of them how
// many are drifted and how many failed their latest apply.
type OwnedCounts struct {
	Owned, Drifted, Failed int
}

// CountOwned counts the stored State's owned resources, each checked as
// EachOwned checks it (its checksum and its form), without copying any:
// a glance at a host of 100,000 resources allocates nothing for each.
func CountOwned(r Reader) (OwnedCounts, error) {
	var n OwnedCounts
	sealed, err := layout(r)
	if err != nil {
		return n, err
	}
	prefix := []byte(prefixOwned)
	err = r.ForEach(func(k, v []byte) error {
		if !bytes.HasPrefix(k, prefix) {
			return nil
		}
		if sealed {
			sum, ok := sealedSum(v)
			if !ok {
				return fmt.Errorf("%w: %s: %d bytes, too short for its checksum", ErrCorrupt, k, len(v))
			}
			v = v[:len(v)-checksumSize]
			c := crc32.Update(0, castagnoli, k)
			c = crc32.Update(c, castagnoli, keyEnd)
			if crc32.Update(c, castagnoli, v) != sum {
				return fmt.Errorf("%w: %s: checksum mismatch", ErrCorrupt, k)
			}
		}
		p, err := parseOwned(v)
		if err != nil {
			return fmt.Errorf("%w: owned %q: %w", ErrCorrupt, k[len(prefix):], err)
		}
		n.Owned++
		if p.drifted {
			n.Drifted++
		}
		if string(p.fields[1]) == string(event.ActionFailed) {
			n.Failed++
		}
		return nil
	})
	return n, err
}

// keyEnd is the byte checksum puts between a key and its value, as a
// slice that is not made anew for each resource counted.
var keyEnd = []byte{0}
