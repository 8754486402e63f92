# berth — build and test.
#
#   make test   installs what the tests need (Debian: docker.io + a running
#               dockerd, openssh-server, busybox-static, nodejs + npm, and a
#               single-node Kubernetes v1.32.0 built once from the Go module
#               proxy and cached in /var/cache/berth-k8s), then runs gofmt,
#               go vet and every test with the race detector.

GO ?= go

.PHONY: test deps check build bench

# -p 4: the long packages (the backends) spend most of their time waiting on
# containers, pods and deliberate timeouts, not on the CPU (daytona.test used
# 8% of a core over 20 minutes), so four at a time on two cores overlaps the
# waiting instead of queueing behind it.
test: deps check
	$(GO) test -race -count=1 -p 4 -timeout 40m ./...

deps:
	bash scripts/ensure-docker.sh
	bash scripts/ensure-sshd.sh
	bash scripts/ensure-apptainer-deps.sh
	sh scripts/ensure-node.sh
	bash scripts/ensure-k8s.sh

check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# bin/berth (the light front) and bin/berth-engine (everything else): keep
# them side by side, the front runs the engine next to it.
build:
	$(GO) build -o bin/ ./cmd/...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./bench/
	$(GO) build -o bin/ ./cmd/...
	bin/berth bench
