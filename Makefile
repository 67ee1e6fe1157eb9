# Tollgate. `make test` is the command CI runs (through .ci/run).
GO ?= go

.PHONY: test bench memory lint fuzz redis-server

test: redis-server
	$(GO) test -race ./...

# Benchmarks for every algorithm on both stores (the Redis ones start their
# own redis-server), then the side-by-side suite against the peers, which
# writes BENCHMARKS.md and docs/latency.png; under ten minutes on two cores
# (the suite alone with -quick: under three).
bench: redis-server
	$(GO) test -run '^$$' -bench 'Allow' -benchmem -benchtime 200ms ./store/...
	cd bench && $(GO) run ./cmd/tollgate-bench -out ../BENCHMARKS.md -png ../docs/latency.png

# Redis bytes per active key for each algorithm (100,000 keys each).
memory: redis-server
	$(GO) test -run '^$$' -bench MemoryPerKey -benchtime 1x ./store/redis

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# A longer run of the memory-vs-Redis differential fuzzer.
fuzz: redis-server
	$(GO) test -run '^$$' -fuzz FuzzDifferential -fuzztime 2m ./store/redis

# The tests run a real redis-server, nginx and Caddy and drive headless
# Chromium; install Debian's when they are missing.
redis-server:
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
