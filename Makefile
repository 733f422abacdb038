GO ?= go
GOFMT ?= gofmt
BIN := bin/sprout
DEADCODE := golang.org/x/tools/cmd/deadcode@v0.52.0
CTL := bin/sproutctl
# What sprout -v reports (stats reports it as 1.13.0+sprout.VERSION, see
# internal/buildinfo); a clone without tags shows the commit.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build sproutctl run test fmt-check bench bench-full bench-ceiling lint fuzz clean soak storm chaos image test-deploy docs install uninstall deb

# The server and the operator's command line.
build: sproutctl
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/sprout

sproutctl:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(CTL) ./cmd/sproutctl

# The documentation generated from the code, rewritten: the flag reference
# in docs/configuration.md and sprout(1) from cmd/sprout's flag table,
# sproutctl's man pages from its cobra commands (cobra/doc), the admin API
# guide's reference from internal/admin/openapi.json, the README's three
# figures from benchmarks/results/latest.json. The same tests, in make
# test, fail while a committed copy differs from what they generate.
docs:
	$(GO) test -count=1 -run '^(TestDocs|TestManPages|TestOpenAPIDocs|TestReadmeHeadline)$$' ./cmd/sprout ./cmd/sproutctl ./internal/admin ./benchmarks/cmd/sproutbench -args -update

# Installs what make build wrote, with the man pages (docs/man), the
# systemd units and sysusers file (deploy/systemd; the unit's ExecStart
# points at BINDIR), shell completions for sproutctl (its own cobra
# generator) and, unless one is there already, /etc/default/sprout, the
# unit's settings. PREFIX and DESTDIR as usual: make build, then
# sudo make install (PREFIX=/usr/local), or DESTDIR=/tmp/stage PREFIX=/usr
# for a package (make deb does so).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
SYSCONFDIR ?= /etc
INSTALL ?= install

install:
	@test -x $(BIN) -a -x $(CTL) || { echo "make install: run make build first" >&2; exit 1; }
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) \
		$(DESTDIR)$(FISHCOMPDIR) $(DESTDIR)$(SYSCONFDIR)/default
	$(INSTALL) -m 0755 $(BIN) $(CTL) $(DESTDIR)$(BINDIR)/
	$(INSTALL) -m 0644 docs/man/*.1 $(DESTDIR)$(MANDIR)/man1/
	sed 's|^ExecStart=/usr/local/bin/sprout |ExecStart=$(BINDIR)/sprout |' deploy/systemd/sprout.service \
		> $(DESTDIR)$(UNITDIR)/sprout.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/sprout.service
	$(INSTALL) -m 0644 deploy/systemd/sprout.socket $(DESTDIR)$(UNITDIR)/
	$(INSTALL) -m 0644 deploy/systemd/sprout.sysusers $(DESTDIR)$(SYSUSERSDIR)/sprout.conf
	$(abspath $(CTL)) completion bash > $(DESTDIR)$(BASHCOMPDIR)/sproutctl
	$(abspath $(CTL)) completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_sproutctl
	$(abspath $(CTL)) completion fish > $(DESTDIR)$(FISHCOMPDIR)/sproutctl.fish
	chmod 0644 $(DESTDIR)$(BASHCOMPDIR)/sproutctl $(DESTDIR)$(ZSHCOMPDIR)/_sproutctl $(DESTDIR)$(FISHCOMPDIR)/sproutctl.fish
	test -e $(DESTDIR)$(SYSCONFDIR)/default/sprout || \
		$(INSTALL) -m 0644 deploy/systemd/sprout.default $(DESTDIR)$(SYSCONFDIR)/default/sprout

# Removes what make install wrote, but /etc/default/sprout and the data.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/sprout $(DESTDIR)$(BINDIR)/sproutctl \
		$(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(wildcard docs/man/*.1))) \
		$(DESTDIR)$(UNITDIR)/sprout.service $(DESTDIR)$(UNITDIR)/sprout.socket \
		$(DESTDIR)$(SYSUSERSDIR)/sprout.conf $(DESTDIR)$(BASHCOMPDIR)/sproutctl \
		$(DESTDIR)$(ZSHCOMPDIR)/_sproutctl $(DESTDIR)$(FISHCOMPDIR)/sproutctl.fish

# The Debian package, bin/sprout_VERSION_ARCH.deb (DEB_OUT), built with
# nfpm as a library (deploy/deb): static PIE binaries, then make install
# into a staging tree (DEB_WORK) with Debian's paths, man pages gzipped;
# see deploy/README.md, "Debian package". Its version is DEB_VERSION: the
# tag without its v, else 0.0~gitDATE.COMMIT.
DEB_ARCH ?= $(shell $(GO) env GOARCH)
DEB_VERSION ?= $(shell v=$$(git describe --tags --exact-match 2>/dev/null) && echo $${v\#v} || \
	echo 0.0~git$$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || echo 0).$$(git rev-parse --short HEAD 2>/dev/null || echo unknown))
DEB_OUT ?= bin/sprout_$(DEB_VERSION)_$(DEB_ARCH).deb
DEB_WORK ?= bin/deb
DEB_GOBUILD = CGO_ENABLED=0 GOARCH=$(DEB_ARCH) $(GO) build -trimpath -buildmode=pie -ldflags "-s -w -X main.version=$(VERSION)"
deb:
	rm -rf $(DEB_WORK) && mkdir -p $(DEB_WORK)/bin
	$(DEB_GOBUILD) -o $(DEB_WORK)/bin/sprout ./cmd/sprout
	$(DEB_GOBUILD) -o $(DEB_WORK)/bin/sproutctl ./cmd/sproutctl
	$(MAKE) --no-print-directory install BIN=$(DEB_WORK)/bin/sprout CTL=$(DEB_WORK)/bin/sproutctl \
		DESTDIR=$(abspath $(DEB_WORK))/root PREFIX=/usr ZSHCOMPDIR=/usr/share/zsh/vendor-completions
	gzip -9n $(DEB_WORK)/root/usr/share/man/man1/*.1
	cd deploy && $(GO) run ./deb -root $(abspath $(DEB_WORK))/root -version '$(DEB_VERSION)' -arch $(DEB_ARCH) \
		-commit "$$(git rev-parse HEAD 2>/dev/null || echo unknown)" -date "$$(git log -1 --format=%ct 2>/dev/null || echo 0)" \
		-out $(abspath $(DEB_OUT))

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
# .ci/go-test ends a failing run with the failures in short, where a CI
# report, which keeps the output's head and tail, shows them.
# deadcode (golang.org/x/tools) lists the functions that no main package and
# no test reaches; any is a failure (docs/development.md, "Dead code").
# third_party/gnet and third_party/go-beanstalk are modules of their own,
# out of reach of ./...: their patches' tests (PATCHES.md in each) run on
# their own lines.
# The short FuzzEngine run goes without -race, for speed; its seeds have just
# run under -race. A new input is minimized for at most 5s: the engine's
# coverage varies with scheduling, so the fuzzer keeps finding "new" inputs,
# and minimizing each for the default 60s stalls it. Fuzz budgets are counts
# of runs, not durations: Go 1.26's coordinator can report its own -fuzztime
# deadline as a failure ("context deadline exceeded", no crasher;
# golang/go#75804, fixed in Go 1.27), and a count sets no deadline. 5000
# runs of FuzzEngine take 5-20s here.
test: fmt-check
	@ref=$$(bash .ci/test-setup) && \
	echo "$(GO) vet ./..." && $(GO) vet ./... && \
	echo "deadcode -test ./..." && dead=$$($(GO) run $(DEADCODE) -test ./...) && \
	{ [ -z "$$dead" ] || { echo "$$dead"; echo "deadcode: the functions above are reached from no main and no test: delete them"; exit 1; }; } && \
	echo "$(GO) test -race -count=1 -timeout 15m ./..." && \
	browser=$$( [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && echo 1 || echo 0 ) && \
	SPROUT_REF_BEANSTALKD="$$ref" SPROUT_REQUIRE_BROWSER=$$browser GO=$(GO) bash .ci/go-test -race -count=1 -timeout 15m ./... && \
	echo "cd third_party/gnet && $(GO) vet ./... && $(GO) test -race -count=1 -run Patch ./..." && \
	(cd third_party/gnet && $(GO) vet ./... && $(GO) test -race -count=1 -run Patch ./...) && \
	echo "cd third_party/go-beanstalk && $(GO) vet ./... && $(GO) test -race -count=1 -run Patch ./..." && \
	(cd third_party/go-beanstalk && $(GO) vet ./... && $(GO) test -race -count=1 -run Patch ./...) && \
	echo "$(GO) test -run '^$$' -fuzz '^FuzzEngine$$' -fuzztime 5000x -fuzzminimizetime 5s ./engine/" && \
	SPROUT_REF_BEANSTALKD="$$ref" $(GO) test -run '^$$' -fuzz '^FuzzEngine$$' -fuzztime 5000x -fuzzminimizetime 5s ./engine/ && \
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

# gofmt's verdict, which make test and make lint both take: any file it
# would change fails them.
fmt-check:
	@unformatted=$$($(GOFMT) -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l reports:"; echo "$$unformatted"; exit 1; fi

lint: fmt-check
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; \
	else echo "staticcheck not installed; skipped"; fi

# go test fuzzes one target per run, hence one line each. Budgets are counts
# (see test's comment): about a minute of FuzzParseSplit, five of FuzzEngine.
FUZZTIME ?= 300000x
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseSplit -fuzztime 400000x -fuzzminimizetime 5s ./codec/
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
# must stay flat under a mixed workload with connection churn. Then the
# cluster's churn through three members of three shard groups for
# SPROUT_CHURN (default 2m, make test's 4 s), with the race detector:
# nothing of the clients gone may be left on any member.
soak:
	SPROUT_SOAK=$${SPROUT_SOAK:-10m} $(GO) test -count=1 -timeout 3h -run '^TestSoak$$' -v ./internal/storm/
	SPROUT_CHURN=$${SPROUT_CHURN:-2m} $(GO) test -race -count=1 -timeout 3h -run '^TestShardGroupsChurnLeavesNothing$$' -v ./internal/member/

# internal/clusterfault's fault test for CHAOS_ROUNDS rounds instead of
# make test's one of each fault: CHAOS_MEMBERS members (3 or 5) in a network
# namespace of their own, the leader killed, frozen and partitioned, a
# follower killed, under load; nothing acknowledged may be lost or come
# back, no job held by two sessions at once outside a failover, each group
# hands out its jobs in order. Without -race (the members too), so the
# rounds go faster; needs root, ip, iptables, unshare and setpriv. Prints a
# summary table at the end. CHAOS_GROUPS=G forms the members with G shard
# groups, a tube of each in the workload, every reserve one across groups;
# with 5 members each group but 0 has 3 replicas. The design's form
# (docs/design/shards.md section 9), about 11 s a round (50 in 9 minutes here):
#   make chaos CHAOS_GROUPS=5 CHAOS_MEMBERS=5
# With as many groups as members every member leads one: the follower's and
# the empty directory's rounds cordon a member first (sproutctl members cordon).
# It runs .ci/test-setup first, as make test does: on a fresh machine that
# installs iptables and ip, without which the test skips.
CHAOS_ROUNDS ?= 50
CHAOS_GROUPS ?= 1
CHAOS_MEMBERS ?= 3
# CHAOS_LOGS=DIR keeps each member's whole output there when a run fails,
# and every member's goroutines when a tube move or placement takes over 8 s.
CHAOS_LOGS ?=
chaos:
	@bash .ci/test-setup >/dev/null
	$(GO) test -count=1 -timeout 90m -v -run '^TestClusterFaults$$' ./internal/clusterfault/ -args -rounds=$(CHAOS_ROUNDS) -groups=$(CHAOS_GROUPS) -members=$(CHAOS_MEMBERS) -member-logs=$(CHAOS_LOGS)

# internal/storm with its heavy test (build tag storm): 19,000 concurrent
# connections against Sprout and beanstalkd, besides the flood,
# hostile-client and 30 s soak tests `make test` runs, and the engine's TLS
# slowloris (1,000 handshakes at a byte a second) at the default 10 s
# handshake timeout. A few minutes, loopback only; SPROUT_STORM_GOALS=1
# make storm also asserts the goals.
storm:
	$(GO) test -tags storm -count=1 -timeout 15m -v ./internal/storm/
	$(GO) test -tags storm -count=1 -timeout 5m -run '^TestTLSSlowloris$$' -v ./engine/
