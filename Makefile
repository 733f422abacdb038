GO ?= go
GOFMT ?= gofmt
BIN := bin/sprout
CTL := bin/sproutctl
# What sprout -v reports; a clone without tags shows the commit.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build sproutctl run test bench bench-full bench-ceiling lint fuzz clean soak storm chaos image test-deploy docs

# The server and the operator's command line.
build: sproutctl
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/sprout

sproutctl:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(CTL) ./cmd/sproutctl

# The documentation generated from the code, rewritten: the flag reference
# in docs/configuration.md and sprout(1) from cmd/sprout's flag table,
# sproutctl's man pages from its cobra commands (cobra/doc), the admin API
# guide's reference from internal/admin/openapi.json. The same tests, in
# make test, fail while a committed copy differs from what they generate.
docs:
	$(GO) test -count=1 -run '^(TestDocs|TestManPages|TestOpenAPIDocs)$$' ./cmd/sprout ./cmd/sproutctl ./internal/admin -args -update

# In memory, nothing to set up; loopback only.
run: build
	./$(BIN) -l 127.0.0.1 -p 11300

# On a fresh machine .ci/test-setup installs what the tests need (as root
# with apt-get) or says what is missing; it prints the reference beanstalkd
# the differential tests compare with: the 1.13 release built from shared/
# beside the clone, else Debian's 1.12 (internal/testproc.Reference).
# Where the setup can install chromium (root with apt-get, as in CI), the
# console's browser tests require it (SPROUT_REQUIRE_BROWSER=1) rather than
# skip without it.
# third_party/gnet is a module of its own, out of reach of ./...: its
# patches' tests (third_party/gnet/PATCHES.md) run on their own line.
# The short FuzzEngine run goes without -race, for speed; its seeds have just
# run under -race. A new input is minimized for at most 5s: the engine's
# coverage varies with scheduling, so the fuzzer keeps finding "new" inputs,
# and minimizing each for the default 60s stalls it.
test:
	@ref=$$(bash .ci/test-setup) && \
	echo "$(GO) vet ./..." && $(GO) vet ./... && \
	echo "$(GO) test -race -count=1 -timeout 15m ./..." && \
	browser=$$( [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && echo 1 || echo 0 ) && \
	SPROUT_REF_BEANSTALKD="$$ref" SPROUT_REQUIRE_BROWSER=$$browser $(GO) test -race -count=1 -timeout 15m ./... && \
	echo "cd third_party/gnet && $(GO) vet ./... && $(GO) test -race -count=1 -run Patch ./..." && \
	(cd third_party/gnet && $(GO) vet ./... && $(GO) test -race -count=1 -run Patch ./...) && \
	echo "$(GO) test -run '^$$' -fuzz '^FuzzEngine$$' -fuzztime 15s -fuzzminimizetime 5s ./engine/" && \
	SPROUT_REF_BEANSTALKD="$$ref" $(GO) test -run '^$$' -fuzz '^FuzzEngine$$' -fuzztime 15s -fuzzminimizetime 5s ./engine/ && \
	$(MAKE) --no-print-directory test-deploy

# deploy/ is its own module (Kubernetes libraries stay out of go.mod): the
# systemd units, the rendered manifests, and the container tests, which
# build the image and run it where Podman or Docker works and skip with a
# message where neither does.
test-deploy:
	@( . deploy/engine.sh ) || echo "test-deploy: no container engine works here; deploy/container's tests will skip"
	cd deploy && $(GO) vet ./... && \
	echo "cd deploy && $(GO) test -count=1 -timeout 10m ./..." && \
	$(GO) test -count=1 -timeout 10m ./...

# Sprout against C beanstalkd: $SPROUT_REF_BEANSTALKD, else the 1.13
# release ../shared/tools/build-beanstalkd-1.13.sh builds beside the clone
# (the reference make test compares with), else Debian's 1.12 on PATH.
# sproutbench finds it (load.FindBeanstalkd) and the report names which;
# BENCHFLAGS="-beanstalkd PATH" picks another. Results replace
# benchmarks/results/latest.* (see benchmarks/README.md).
bench:
	$(MAKE) --no-print-directory build
	$(GO) run ./benchmarks/cmd/sproutbench -sprout $(BIN) -command "make bench" $(BENCHFLAGS)

# Also runs `make storm`: 19,000 concurrent connections, with the hostile
# clients' figures beside beanstalkd's.
bench-full:
	$(MAKE) --no-print-directory build
	$(GO) run ./benchmarks/cmd/sproutbench -full -sprout $(BIN) -command "make bench-full" $(BENCHFLAGS)
	$(MAKE) --no-print-directory storm

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

# go test fuzzes one target per run, hence one line each.
FUZZTIME ?= 5m
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseSplit -fuzztime 60s -fuzzminimizetime 5s ./codec/
	$(GO) test -run '^$$' -fuzz '^FuzzEngine$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./engine/

clean:
	rm -rf bin

# The container image (deploy/Dockerfile, FROM scratch: nothing is pulled).
# The engine is Docker where `docker info` answers, else Podman; Podman
# reads deploy/containers.conf (runc, explicit ulimits) when runc is
# installed and CONTAINERS_CONF is not already set. See deploy/README.md.
IMAGE ?= sprout:dev
image:
	rm -rf bin/image && mkdir -p bin/image/data
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/image/sprout ./cmd/sprout
	@. deploy/engine.sh && set -x && \
	$$ENGINE build --build-arg VERSION=$(VERSION) \
		--build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
		-t $(IMAGE) -f deploy/Dockerfile bin/image && \
	{ set +x; } 2>/dev/null && \
	echo "image $(IMAGE): $$($$ENGINE image inspect -f '{{.Size}}' $(IMAGE)) bytes ($$ENGINE)"

# internal/storm's soak test for 10 minutes instead of `make test`'s 30 s
# (SPROUT_SOAK=1h make soak for longer): RSS, descriptors, threads and p99
# must stay flat under a mixed workload with connection churn.
soak:
	SPROUT_SOAK=$${SPROUT_SOAK:-10m} $(GO) test -count=1 -timeout 3h -run '^TestSoak$$' -v ./internal/storm/

# internal/clusterfault's fault test for CHAOS_ROUNDS rounds instead of
# make test's one of each fault: three members in a network namespace of
# their own, the leader killed, frozen and partitioned, a follower killed,
# under load; nothing acknowledged may be lost or come back. Without -race
# (the members too), so the rounds go faster; needs root, ip, iptables,
# unshare and setpriv. Prints a summary table at the end.
CHAOS_ROUNDS ?= 50
chaos:
	$(GO) test -count=1 -timeout 90m -v -run '^TestClusterFaults$$' ./internal/clusterfault/ -args -rounds=$(CHAOS_ROUNDS)

# internal/storm with its heavy test (build tag storm): 19,000 concurrent
# connections against Sprout and beanstalkd, besides the flood,
# hostile-client and 30 s soak tests `make test` runs. A few minutes,
# loopback only; SPROUT_STORM_GOALS=1 make storm also asserts the goals.
storm:
	$(GO) test -tags storm -count=1 -timeout 15m -v ./internal/storm/
