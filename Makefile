# berth — build and test.
#
#   go test ./...   the fast default (tier 0): unit tests and the local
#                   backend's suite; every engine (docker, ssh, kubernetes,
#                   ...) is skipped with one line naming BERTH_TEST_ENGINES.
#   make test       what CI runs (tier 1): installs what the tests need
#                   (Debian: docker.io + a running dockerd, openssh-server,
#                   busybox-static, bubblewrap + squashfs-tools, nodejs +
#                   npm, and a single-node Kubernetes v1.32.0 built once from
#                   the Go module proxy and cached in /var/cache/berth-k8s),
#                   then runs gofmt, go vet and every test against every
#                   engine (BERTH_TEST_ENGINES=all: a missing engine fails)
#                   with the race detector, and prints each package's wall
#                   time at the end.
#   make test-all   tier 2 (nightly, before a release): make test's run with
#                   the secondary configurations in full (BERTH_TEST_TIER=all),
#                   then the tests that have ever flaked, three times each
#                   (scripts/soak.txt).
#
# docs/testing.md has the engines and the tiers.

GO ?= go

.PHONY: test test-all deps check build bench testtimes

# -p 4: the long packages (the backends) spend most of their time waiting on
# containers, pods and deliberate timeouts, not on the CPU (daytona.test used
# 8% of a core over 20 minutes), so four at a time on two cores overlaps the
# waiting instead of queueing behind it.
test: deps check testtimes
	BERTH_TEST_ENGINES=all bin/testtimes $(GO) test -json -race -count=1 -p 4 -timeout 40m ./...

test-all: deps check testtimes
	BERTH_TEST_ENGINES=all BERTH_TEST_TIER=all bin/testtimes $(GO) test -json -race -count=1 -p 4 -timeout 80m ./...
	BERTH_TEST_ENGINES=all GO=$(GO) SOAK_COUNT=3 bash scripts/soak.sh

# bin/testtimes shows go test -json's events as plain go test would, then
# each package's wall time (internal/testtimes); its exit status is go
# test's.
testtimes:
	$(GO) build -o bin/testtimes ./internal/testtimes

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
