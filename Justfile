# mesh-host tasks. Each recipe is one plain command, runnable without just.

version := `git describe --always --dirty 2>/dev/null || echo dev`

# Build both binaries into bin/.
build:
    go build -ldflags "-X main.version={{version}}" -o bin/ ./cmd/...

# Run every test (the README's test command).
test:
    go test ./...

# Run the benchmarks the issues ask figures for; compare runs with benchstat.
bench:
    go test -run '^$' -bench . -benchmem -count 6 ./journal/... ./projector/... ./cmd/mesh-host/... | tee bench.txt

# gofmt, go vet, and the race detector on the concurrent packages.
lint:
    test -z "$(gofmt -l $(git ls-files '*.go'))"
    go vet ./...
    go test -race -short ./journal/... ./cmd/mesh-host/...

# The main job: the host service on a sandbox state directory.
demo:
    go run ./cmd/mesh-host --state-dir ./sandbox/var/lib/mesh-host serve

# What CI runs.
ci:
    bash .ci/run
