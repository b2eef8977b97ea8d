package main

import (
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// journalSize is a journal's size two ways: the file, which bbolt grows in
// steps well ahead of its use, and the bytes its buckets use in their pages.
type journalSize struct {
	file, inUse int64
}

// measureJournal reads a closed journal's sizes. It opens the file read
// only, changing nothing.
func measureJournal(path string) (journalSize, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return journalSize{}, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return journalSize{}, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	size := journalSize{file: fi.Size()}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			// A bucket's stats count its nested buckets too.
			st := b.Stats()
			size.inUse += int64(st.BranchInuse + st.LeafInuse)
			return nil
		})
	})
	return size, err
}
