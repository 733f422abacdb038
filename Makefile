GO ?= go
GOFMT ?= gofmt
BIN := bin/sprout
# What sprout -v reports; a clone without tags shows the commit.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build run test bench bench-full bench-ceiling lint fuzz clean

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/sprout

# In memory, nothing to set up; loopback only.
run: build
	./$(BIN) -l 127.0.0.1 -p 11300

# The differential tests compare with the beanstalkd 1.13 release, built once
# here by the script in shared/ beside the clone, unless SPROUT_REF_BEANSTALKD
# already names a reference; without the script, or if the build fails, they
# compare with Debian's 1.12 on PATH (internal/testproc.Reference).
test:
	$(GO) vet ./...
	@ref="$${SPROUT_REF_BEANSTALKD:-}"; script="$(CURDIR)/../shared/tools/build-beanstalkd-1.13.sh"; \
	if [ -z "$$ref" ] && [ -f "$$script" ]; then \
		ref=$$(bash "$$script") || { \
			echo "make test: building beanstalkd 1.13 failed; comparing with Debian's 1.12"; \
			ref=$$(command -v beanstalkd || true); }; \
	fi; \
	if [ -n "$$ref" ]; then echo "make test: reference $$ref ($$("$$ref" -v 2>&1))"; fi; \
	echo "$(GO) test -race -count=1 -timeout 15m ./..."; \
	SPROUT_REF_BEANSTALKD="$$ref" $(GO) test -race -count=1 -timeout 15m ./...

bench:
	$(MAKE) --no-print-directory build
	$(GO) run ./benchmarks/cmd/sproutbench -sprout $(BIN) -command "make bench" $(BENCHFLAGS)

bench-full:
	$(MAKE) --no-print-directory build
	$(GO) run ./benchmarks/cmd/sproutbench -full -sprout $(BIN) -command "make bench-full" $(BENCHFLAGS)

# The machine's ceiling: Sprout against nullqueue, a server that does
# nothing but answer (benchmarks/ceiling). Needs a C compiler.
bench-ceiling:
	$(MAKE) --no-print-directory build
	$(CC) -O2 -o bin/nullqueue benchmarks/ceiling/nullqueue.c
	$(GO) run ./benchmarks/cmd/sproutbench -sprout $(BIN) -beanstalkd bin/nullqueue -base-name nullqueue \
		-only '^(prodcons-c100|put-only-c100|durable-f0-c100|durable-put-f0-c100)$$' -out - $(BENCHFLAGS)

lint:
	@unformatted=$$($(GOFMT) -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l reports:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; \
	else echo "staticcheck not installed; skipped"; fi

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseSplit -fuzztime 60s -fuzzminimizetime 5s ./codec/

clean:
	rm -rf bin
