package journal

import (
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// Release drops the pages of the file this process has read from its
// resident set (see releasePages): for a service, once a reconcile that
// read much of it is over.
func (j *Journal) Release() error {
	return j.view(func(tx *bolt.Tx) error {
		releasePages(tx)
		return nil
	})
}

// releasePages drops the pages of the journal's file that this process
// has read from its resident set. They stay in the page cache, and a later
// read faults them back in from there. A read of the whole file (Check,
// the scrub's and `journal --verify`'s; a replay) would otherwise
// leave all of it counted as the process's memory: bbolt reads through a
// mapping of the file, and a mapped page once touched stays resident until
// the kernel needs it back.
//
// A file under releaseFloor is left alone: it costs the process at most
// its size, and dropping it costs more than it saves. Every later read
// faults its pages back in, and madvise on a mapping shared by the
// process's threads interrupts each core the process ran on to flush
// its TLB. A service calls Release after every reconcile: in the beds'
// fleet runner, where a thousand small journals share one process, that
// was a tenth of a rollout's CPU.
//
// It is called inside a read transaction, which holds the mapping in
// place: bbolt maps the file anew only under a lock that waits for every
// open transaction. tx.Size() is within the mapping, which covers the
// file. madvise's error, if any, is ignored: nothing depends on it.
func releasePages(tx *bolt.Tx) {
	info := tx.DB().Info()
	if info == nil || info.Data == 0 || tx.Size() < releaseFloor {
		return
	}
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, info.Data, uintptr(tx.Size()), uintptr(unix.MADV_DONTNEED))
}

// releaseFloor is the size of file below which releasePages leaves its
// pages resident.
const releaseFloor = 1 << 20
