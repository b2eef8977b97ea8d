package main

import (
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/archive"
	"github.com/mesh-host/mesh-host/drivers/directory"
	"github.com/mesh-host/mesh-host/drivers/file"
	"github.com/mesh-host/mesh-host/drivers/pkg"
	"github.com/mesh-host/mesh-host/drivers/unit"
)

// newDrivers chooses the driver of each kind for root: the package backend
// by what the machine has, the unit driver by whether a manager runs.
func newDrivers(root *drivers.Root) map[drivers.Kind]drivers.Driver {
	return map[drivers.Kind]drivers.Driver{
		drivers.KindFile:      file.New(root),
		drivers.KindDirectory: directory.New(root),
		drivers.KindArchive:   archive.New(root, archive.Options{}),
		drivers.KindPackage:   pkg.New(root, pkg.Options{}),
		drivers.KindUnit:      unit.New(root, unit.Options{}),
	}
}
