package main

import "github.com/mesh-host/mesh-host/cmd/internal/command"

// Every command that finds the journal damaged (a record that fails its
// checksum, a projection value that fails its own, a file cut short or
// emptied) exits exitDamaged, distinct from command.ExitFailed so that a script, or
// the launcher's log, can tell "the journal cannot be trusted" from
// "something failed".

// damageStop is the one way a command stops on damage: exit exitDamaged
// with err, which is the journal's recovery message (see hostjournal.AsDamage).
func damageStop(err error) error { return &command.ExitError{Code: exitDamaged, Err: err} }
