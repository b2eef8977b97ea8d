// Package store owns the control plane's JetStream buckets and streams:
// one table of every bucket and stream with its settings (Ensure makes
// them, so their settings are written once), their lookup by the
// operator's commands with the advice to start `meshctl serve` when one
// is missing, and the desired-state record, which only Desired reads and
// writes, its older stored forms included.
//
// It is not the wire protocol (package linkproto names every bucket,
// stream, key and message) and it holds nothing in memory that another
// process needs: every control service and command reads the cluster.
package store
