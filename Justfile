# mesh-host tasks. Each recipe is one plain command, runnable without just.

version := `git describe --always --dirty 2>/dev/null || echo dev`

# Build both binaries into bin/.
build:
    go build -ldflags "-X main.version={{version}}" -o bin/ ./cmd/...

# The release artifacts in dist/: .deb, .rpm, .apk, Arch package, tarball, release archive.
package:
    go run ./packaging/build --version $(git describe --always --dirty) --out dist/

# Run every test (the README's test command).
test:
    go test ./...

# Run the benchmarks the issues ask figures for; compare runs with benchstat.
bench:
    mkdir -p ../benchtmp && TMPDIR=$(cd .. && pwd)/benchtmp go test -run '^$' -bench . -benchmem -count 6 ./journal/... ./projector/... ./cmd/mesh-host/... | tee bench.txt

# gofmt, go vet, and the race detector on the concurrent packages.
lint:
    test -z "$(gofmt -l $(git ls-files '*.go'))"
    go vet ./...
    go test -race -short ./journal/... ./cmd/mesh-host/... ./cmd/meshctl/... ./linkproto ./upgrade ./drivers/file ./drivers/archive ./drivers/exec ./drivers/account ./drivers/unit ./drivers/rootfs ./cmd/internal/tuning
    go test -race -short -run 'Chunked' ./declaration  # the parse of chunks ahead

# The main job: a single-machine mesh in ./sandbox (stop it with `go run ./testbeds/demo down`).
demo:
    go run ./testbeds/demo

# The link's figures (push latency, idle host, 1,000 nodes' heartbeats, binary size).
figures:
    go test ./testbeds -run '^$' -bench . -benchtime 200x

# What CI runs.
ci:
    bash .ci/run
