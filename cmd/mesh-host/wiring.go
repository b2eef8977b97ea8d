package main

import (
	"strconv"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/account"
	"github.com/mesh-host/mesh-host/drivers/archive"
	"github.com/mesh-host/mesh-host/drivers/directory"
	"github.com/mesh-host/mesh-host/drivers/exec"
	"github.com/mesh-host/mesh-host/drivers/file"
	"github.com/mesh-host/mesh-host/drivers/pkg"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/drivers/unit"
	"github.com/mesh-host/mesh-host/projector"
)

// driverOptions are what the drivers are told of the host beyond their
// root: how to redact the secrets a reconcile opened, and what the
// journal remembers of users and groups.
type driverOptions struct {
	redact func(string) string
	// ids and made are the projection's (projector.State.IDs, .Made).
	ids, made map[string]string
}

// newDrivers chooses the driver of each kind for root: the package backend
// by what the machine has, the unit and exec drivers by whether a manager
// runs. The owner closes them (closeDrivers).
func newDrivers(root *rootfs.Root, o driverOptions) map[drivers.Kind]drivers.Driver {
	accounts := account.Options{
		// Every id a name held under the host stays that name's.
		Reserved: o.reserved(),
		// Only what the host made is the host's to remove.
		Created: func(kind, name string) bool {
			switch kind {
			case account.CreatedUser:
				return o.made["user:"+name] == "user:"+name
			case account.CreatedGroup:
				return o.made["group:"+name] == "group:"+name
			case account.CreatedUserGroup:
				return o.made["group:"+name] == "user:"+name
			}
			return false
		},
	}
	return map[drivers.Kind]drivers.Driver{
		drivers.KindFile:      file.New(root),
		drivers.KindDirectory: directory.New(root),
		drivers.KindArchive:   archive.New(root, archive.Options{}),
		drivers.KindPackage:   pkg.New(root, pkg.Options{}),
		drivers.KindUnit:      unit.New(root, unit.Options{Redact: o.redact}),
		drivers.KindExec:      exec.New(root, exec.Options{Redact: o.redact}),
		drivers.KindUser:      account.NewUsers(root, accounts),
		drivers.KindGroup:     account.NewGroups(root, accounts),
	}
}

// reserved is the lookup of ids held (projector.State.IDs, "uid:1001"):
// a map keyed by kind and number, made once, since an allocation asks it
// for every id of its range.
func (o driverOptions) reserved() func(kind string, id int) (string, bool) {
	type key struct {
		kind string
		id   int
	}
	held := make(map[key]string, len(o.ids))
	for k, name := range o.ids {
		kind, n, _ := strings.Cut(k, ":")
		if id, err := strconv.Atoi(n); err == nil {
			held[key{kind, id}] = name
		}
	}
	return func(kind string, id int) (string, bool) {
		name, ok := held[key{kind, id}]
		return name, ok
	}
}

// heldAccounts are the projection's word on users and groups, for the
// drivers.
func heldAccounts(s projector.State) driverOptions {
	return driverOptions{ids: s.IDs, made: s.Made}
}

// closer is a driver that holds something open (the unit driver's
// connection to the service manager).
type closer interface{ Close() error }

// closeDrivers closes the drivers that hold something open.
func closeDrivers(ds map[drivers.Kind]drivers.Driver) {
	for _, d := range ds {
		if c, ok := d.(closer); ok {
			_ = c.Close()
		}
	}
}
