module github.com/mesh-host/mesh-host

go 1.26.8

require (
	github.com/alecthomas/kong v1.17.0
	github.com/oklog/run v1.2.0
	github.com/rogpeppe/go-internal v1.16.0
	go.etcd.io/bbolt v1.5.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/tools v0.36.0 // indirect
)
