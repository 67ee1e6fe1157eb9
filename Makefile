# Tollgate. `make test` is the command CI runs (through .ci/run).
GO ?= go

.PHONY: test bench lint fuzz redis-server

test: redis-server
	$(GO) test -race ./...

# Benchmarks for every algorithm on both stores (the Redis ones start their
# own redis-server).
bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem ./store/...

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# A longer run of the memory-vs-Redis differential fuzzer.
fuzz: redis-server
	$(GO) test -run '^$$' -fuzz FuzzDifferential -fuzztime 2m ./store/redis

# The tests run a real redis-server; install Debian's when it is missing.
redis-server:
	@command -v redis-server >/dev/null || { \
		echo "installing redis-server (the tests run a real Redis)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }
