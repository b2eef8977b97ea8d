package tuning

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// interval is how often Run looks at the stacks.
const interval = 10 * time.Second

// minGrowth is the least growth of the stacks worth a collection: a few
// hundred connections' worth.
const minGrowth = 16 << 20

// SettleStacks gives back the stack memory that bursts of traffic leave
// behind in a long-running service.
//
// The embedded broker runs two goroutines for each connection, and either
// grows its stack to 32 KB when it writes (nats-server's flush keeps 24 KB
// of write vectors on its stack): the reader when it passes a node's
// heartbeat on to the service, the writer when it answers the node. The
// runtime shrinks a stack only during a collection, by half each time, and
// an idle service allocates little, so collections are rare (the runtime
// forces one every two minutes), and a few thousand nodes just connected
// leave tens of megabytes of stacks mostly unused.
//
// So SettleStacks looks at the stacks every few seconds, and when they have
// grown by more than minGrowth (or a quarter) since they last settled, it
// collects and returns the freed pages to the system, again at each look
// while that shrinks them. What a stack uses is not a guide: the runtime
// knows it only from the last collection, which during a burst finds the
// stacks in use.
//
// It looks at the process's stacks every interval until ctx is done, and
// collects when they have grown; log gets a debug record of each
// collection.
func SettleStacks(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	s := settler{minGrowth: minGrowth}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if before, after, ok := s.tick(readStacks, debug.FreeOSMemory); ok {
				log.Debug("collected for grown stacks", "before_mb", before>>20, "after_mb", after>>20)
			}
		}
	}
}

// readStacks is the memory the runtime holds for goroutine stacks.
func readStacks() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		// A runtime without the metric: never collect on its account.
		return 0
	}
	return s[0].Value.Uint64()
}

// settler decides when a collection is worth its CPU.
type settler struct {
	minGrowth uint64
	// floor is what the stacks held after the last collection that no
	// longer shrank them (a stack is halved only while it uses less than
	// a quarter of itself, and goroutines in use keep theirs), or less
	// when goroutines ended since.
	floor uint64
	// again is set when the last collection shrank the stacks: the next
	// may halve them again.
	again bool
}

// due says whether stacks holding held bytes are worth a collection.
func (s *settler) due(held uint64) bool {
	return s.again || held > s.floor+max(s.minGrowth, s.floor/4)
}

// tick collects with settle when due, and notes what it gave back: what
// the stacks held before and after, and whether it collected.
func (s *settler) tick(read func() uint64, settle func()) (held, after uint64, collected bool) {
	held = read()
	if !s.due(held) {
		// Goroutines gone (nodes that left) take their stacks with
		// them: growth from there is what a collection may give back.
		s.floor = min(s.floor, held)
		return held, held, false
	}
	settle()
	after = read()
	s.again = after < held-held/10
	if !s.again {
		s.floor = after
	}
	return held, after, true
}
