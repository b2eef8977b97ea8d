package tuning

import (
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
)

// grow uses about depth KB of stack.
//
//go:noinline
func grow(depth int) byte {
	var frame [1024]byte
	frame[depth%len(frame)] = byte(depth)
	if depth == 0 {
		return frame[0]
	}
	return grow(depth-1) + frame[depth%len(frame)]
}

// parkGrown starts n goroutines that each grow their stack to some 128 KB,
// return from that depth and wait on release.
func parkGrown(t *testing.T, n int) (release func()) {
	t.Helper()
	var ready sync.WaitGroup
	stop := make(chan struct{})
	var done sync.WaitGroup
	for range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			grow(100)
			ready.Done()
			<-stop
		}()
	}
	ready.Wait()
	return func() { close(stop); done.Wait() }
}

// A burst of goroutines that grew their stacks and went idle is what a
// connection storm leaves; the settler collects until the stacks stop
// shrinking, and that gives most of the memory back.
func TestGrownStacksAreGivenBack(t *testing.T) {
	// No collection but the settler's during the test: the point is
	// that without one the stacks stay grown.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	runtime.GC()
	base := readStacks()
	release := parkGrown(t, 256)
	defer release()
	grown := readStacks()
	if grown-base < 256*64<<10 {
		t.Fatalf("the goroutines hold %d KB of stack beyond the %d KB before: the test did not grow them", (grown-base)>>10, base>>10)
	}

	s := settler{minGrowth: 4 << 20}
	collections := 0
	for range 20 {
		s.tick(readStacks, func() { collections++; debug.FreeOSMemory() })
	}
	held := readStacks()
	t.Logf("stacks: %d KB before the goroutines, %d KB grown, %d KB after %d collections", base>>10, grown>>10, held>>10, collections)
	if held-base > (grown-base)/8 {
		t.Errorf("the stacks hold %d KB beyond the %d KB before the goroutines, of the %d KB they grew: not given back", (held-base)>>10, base>>10, (grown-base)>>10)
	}
	if collections > 10 {
		t.Errorf("%d collections for one burst: the settler does not stop once the stacks no longer shrink", collections)
	}
}

// due, tick by tick: nothing while the stacks grow by less than is worth
// a collection; a collection while it shrinks them; none once they stop
// shrinking until they grow by a quarter again.
func TestSettlerCollectsOnlyWhileItPays(t *testing.T) {
	const mb = 1 << 20
	s := settler{minGrowth: 16 * mb}
	var held uint64
	collected := false
	// A collection halves what is held beyond stuck: stacks still used
	// by more than a quarter are not shrunk, however often it collects.
	const stuck = 60 * mb
	settle := func() {
		collected = true
		if held > stuck {
			held -= (held - stuck) / 2
		}
	}
	step := func(h uint64) bool {
		held, collected = h, false
		s.tick(func() uint64 { return held }, settle)
		return collected
	}
	if step(10 * mb) {
		t.Error("collected for 10 MB of stacks, under the 16 MB worth one")
	}
	if !step(200 * mb) {
		t.Fatal("no collection for 200 MB of stacks")
	}
	rounds := 1
	for ; rounds < 10 && s.again; rounds++ {
		if !step(held) {
			t.Fatal("no collection after one that shrank the stacks")
		}
	}
	if s.again {
		t.Fatal("still collecting after ten rounds")
	}
	settledAt := held
	t.Logf("settled at %d MB after %d collections", settledAt/mb, rounds)
	if settledAt > stuck+stuck/5 {
		t.Errorf("stopped at %d MB, the collections would have taken it to %d MB", settledAt/mb, stuck/mb)
	}
	if step(settledAt) {
		t.Errorf("collected again at %d MB, where the last collection left the stacks", settledAt/mb)
	}
	if step(settledAt + settledAt/5) {
		t.Errorf("collected after the stacks grew by a fifth past where they settled")
	}
	if !step(2 * settledAt) {
		t.Errorf("no collection after the stacks doubled past where they settled")
	}
	for s.again {
		step(held)
	}
	// Half the goroutines end, and as many connect again.
	if step(stuck / 2) {
		t.Errorf("collected when the stacks shrank")
	}
	if !step(stuck/2 + 20*mb) {
		t.Errorf("no collection after the stacks grew by 20 MB from where goroutines ending left them")
	}
}
