package client

import (
	"runtime"
	"sync"
)

// decodeAside is how a fleet listing reads a stream or a bucket: read
// runs on the caller's goroutine and hands each raw value to put; decode
// turns values into results on goroutines of their own, one a CPU; use
// receives the results one at a time, in no particular order, on one
// goroutine. It returns once use has had every result, with read's error.
//
// Why: with thousands of nodes encoding/json is most of the listing's own
// CPU, and decoding on each source's reader in turn leaves the other cores
// idle (docs/performance.md, "Figures behind choices in the code").
func decodeAside[R, D any](read func(put func(R)) error, decode func(R) D, use func(D)) error {
	raw := make(chan R, 256)
	decoded := make(chan D, 256)
	var decoders sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		decoders.Go(func() {
			for r := range raw {
				decoded <- decode(r)
			}
		})
	}
	used := make(chan struct{})
	go func() {
		defer close(used)
		for d := range decoded {
			use(d)
		}
	}()
	err := read(func(r R) { raw <- r })
	close(raw)
	decoders.Wait()
	close(decoded)
	<-used
	return err
}
