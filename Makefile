# Tollgate. `make test` is the command CI runs (through .ci/run).
GO ?= go

.PHONY: test soak bench memory lint fuzz deps

# gotestsum (from the Go module proxy, built once into the build cache)
# runs go test and lists the slowest tests.
GOTESTSUM = $(GO) run gotest.tools/gotestsum@v1.13.0
# Test binaries run at once: most tests wait on servers, clients and
# deadlines, so more than the 2 cores' worth keeps the compiler busy.
P ?= 4

# Every package's tests with the race detector, then the 10 slowest tests
# and the wall time.
test: deps
	@json=$$(mktemp); start=$$(date +%s); \
	$(GOTESTSUM) --format pkgname --jsonfile $$json -- -race -count=1 -p $(P) ./...; rc=$$?; \
	echo "slowest tests:"; $(GOTESTSUM) tool slowest --jsonfile $$json --num 10 | sed 's/^/  /'; rm -f $$json; \
	took=$$(( $$(date +%s) - start )); \
	echo "make test: $$( [ $$rc = 0 ] && echo passed || echo FAILED ) in $$((took / 60))m$$((took % 60))s"; exit $$rc

# make test N times from fresh clones of HEAD with empty build caches,
# with LOAD CPU-burning processes beside it (see .ci/soak).
N ?= 5
LOAD ?= 0
soak:
	N=$(N) LOAD=$(LOAD) .ci/soak

# Benchmarks for every algorithm on both stores (the Redis ones start their
# own redis-server), then the side-by-side suite against the peers, which
# writes BENCHMARKS.md and docs/latency.png; under ten minutes on two cores
# (the suite alone with -quick: under three).
bench: deps
	$(GO) test -run '^$$' -bench 'Allow' -benchmem -benchtime 200ms ./store/...
	cd bench && $(GO) run ./cmd/tollgate-bench -out ../BENCHMARKS.md -png ../docs/latency.png

# Redis bytes per active key for each algorithm (100,000 keys each).
memory: deps
	$(GO) test -run '^$$' -bench MemoryPerKey -benchtime 1x ./store/redis

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# A longer run of the memory-vs-Redis differential fuzzer.
fuzz: deps
	$(GO) test -run '^$$' -fuzz FuzzDifferential -fuzztime 2m ./store/redis

# The tests run a real redis-server, nginx and Caddy and drive headless
# Chromium; install Debian's when they are missing, and build gotestsum.
deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	command -v caddy >/dev/null || missing="$$missing caddy"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing (the tests run a real Redis, nginx, Caddy and a headless browser)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(GO) mod download && $(GOTESTSUM) --version >/dev/null
