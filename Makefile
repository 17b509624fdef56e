# kvferry build. `make` builds the library, headers and tools under build/;
# `make test` runs every test; `make demo` runs the demo.

GO        ?= go
BUILD     ?= build
LIBDIR    := $(BUILD)/lib
BINDIR    := $(BUILD)/bin
INCDIR    := $(BUILD)/include
SONAME    := libkvferry.so.1
LIB       := $(LIBDIR)/$(SONAME)
# Compile the C++ shims against real NIXL / TensorRT-LLM headers instead of
# our own layout declarations when these are set.
NIXL_INCLUDE_DIR   ?=
TRTLLM_INCLUDE_DIR ?=

GOFLAGS_LIB := -buildmode=c-shared -trimpath
LDFLAGS_LIB := -s -w -X=runtime.godebugDefault=asyncpreemptoff=1 \
  -extldflags '-Wl,--version-script=$(CURDIR)/plugin/exports.map -Wl,-soname,$(SONAME) -Wl,-z,now'
SHIM_CXXFLAGS :=
ifneq ($(NIXL_INCLUDE_DIR),)
SHIM_CXXFLAGS += -DKVFERRY_WITH_NIXL_HEADERS -I$(NIXL_INCLUDE_DIR) -I$(NIXL_INCLUDE_DIR)/utils
endif
ifneq ($(TRTLLM_INCLUDE_DIR),)
SHIM_CXXFLAGS += -DKVFERRY_WITH_TRTLLM_HEADERS -I$(TRTLLM_INCLUDE_DIR)
endif

HEADERS := $(wildcard include/*.h)
# Tests run in a fresh network namespace with only loopback when possible.
NETNS   := scripts/in-netns.sh
BINS    := $(patsubst cmd/%,%,$(wildcard cmd/*))

.PHONY: all lib bins headers mod-download test test-go test-suites lint demo demo-c bench bench-ssd clean FORCE

all: lib bins headers

lib: $(LIB)

# Go decides what is stale; FORCE lets it.
$(LIB): FORCE
	@mkdir -p $(LIBDIR) $(LIBDIR)/nixl $(LIBDIR)/trtllm
	CGO_CXXFLAGS="$(SHIM_CXXFLAGS)" $(GO) build $(GOFLAGS_LIB) -ldflags "$(LDFLAGS_LIB)" -o $(LIB) ./plugin
	@rm -f $(LIBDIR)/libkvferry.so.1.h
	ln -sf $(SONAME) $(LIBDIR)/libkvferry.so
	ln -sf $(SONAME) $(LIBDIR)/libtransfer_engine.so
	ln -sf ../$(SONAME) $(LIBDIR)/nixl/libplugin_KVFERRY.so
	ln -sf ../$(SONAME) $(LIBDIR)/trtllm/libtensorrt_llm_mooncake_wrapper.so

headers: $(HEADERS)
	@mkdir -p $(INCDIR)
	cp $(HEADERS) $(INCDIR)/

bins: FORCE
	@mkdir -p $(BINDIR)
	@for b in $(BINS); do \
	  echo "$(GO) build -o $(BINDIR)/$$b ./cmd/$$b"; \
	  $(GO) build -trimpath -o $(BINDIR)/$$b ./cmd/$$b || exit 1; \
	done

# Every test: Go (race + invariants), lint, brief fuzzing, then the C, C++,
# Python and multi-process suites under tests/*/run.sh. Fuzzing budgets are
# execution counts (about 5-10 s each on 2 cores), not durations: with a
# duration, Go before 1.27 can fail a target with a bare "context deadline
# exceeded" when its workers miss the coordinator's stop deadline on a busy
# machine (go.dev/issue/75804), although no input failed.
test: all test-go test-suites

# The suites run in a network namespace with only loopback: every module
# they build with is fetched first (a fresh machine has none cached), and
# the Debian packages they need are installed, or the exact command to
# install them is printed (scripts/test-deps.sh).
mod-download:
	scripts/test-deps.sh ensure
	$(GO) mod download

test-go: mod-download
	$(GO) vet ./...
	$(NETNS) $(GO) test -race -tags invariants -timeout 15m ./...
	$(NETNS) $(GO) test -run '^$$' -fuzz FuzzDecodeHeader -fuzztime 50000x ./engine/transport/tcp/tcpwire
	$(NETNS) $(GO) test -run '^$$' -fuzz FuzzDecodeFrame -fuzztime 100000x ./engine/rpc/rpcframe
	$(NETNS) $(GO) test -run '^$$' -fuzz FuzzUnmarshal -fuzztime 100000x ./engine/descriptor
	$(NETNS) $(GO) test -run '^$$' -fuzz '^FuzzFetch$$' -fuzztime 8000x ./engine/metadata
	$(NETNS) $(GO) test -run '^$$' -fuzz '^FuzzClientReply$$' -fuzztime 8000x ./engine/metadata/http
	$(NETNS) $(GO) test -run '^$$' -fuzz '^FuzzParsePublicData$$' -fuzztime 15000x ./agent/nixl/publicdata
	$(NETNS) $(GO) test -run '^$$' -fuzz '^FuzzServer$$' -fuzztime 20000x ./engine/peerauth
	$(NETNS) $(GO) test -run '^$$' -fuzz '^FuzzCheckShape$$' -fuzztime 20000x ./store/wire/shape
	$(NETNS) $(GO) test -run '^$$' -fuzz '^FuzzUnmarshal$$' -fuzztime 50000x ./store/wire/structpack
	$(NETNS) $(GO) test -run '^$$' -fuzz '^FuzzMessages$$' -fuzztime 20000x ./store/wire/coro
	$(NETNS) $(GO) test -run '^$$' -fuzz '^FuzzJournalReplay$$' -fuzztime 20000x ./engine/metadata/http
	scripts/fuzz.sh short

test-suites: all mod-download
	@tests/run.sh

.PHONY: faults fuzz-long kill-matrix soak asan hw-check hw-check-build hw-rehearse
# Every fuzz target to its long budget (parsers 10 million executions,
# stateful targets an hour or a million) and the C API fuzz driver, resumable
# across machines: cumulative counts in docs/reports/fuzz-ledger.tsv and
# corpora in each package's testdata/fuzz, both committed (a rerun does what
# is still missing). FUZZ_LONG_BUDGET=2h bounds one run's wall time, split
# across the targets (scripts/fuzz.sh). At SCHED_IDLE where chrt allows it,
# else nice 19: it yields to everything else.
fuzz-long: all
	if chrt -i 0 true 2>/dev/null; then chrt -i 0 scripts/fuzz.sh long; else nice -n 19 scripts/fuzz.sh long; fi

# The whole network fault matrix (tests/faults; make test runs its short
# form), as root; the results table goes to build/faults.md.
faults: all
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/faults.jsonl
	KVFERRY_FAULTS_FULL=1 KVFERRY_FAULTS_RESULTS=$(CURDIR)/$(BUILD)/faults.jsonl KVFERRY_FAULTS_PARALLEL=4 $(NETNS) tests/faults/run.sh
	tests/faults/table.py $(BUILD)/faults.jsonl | tee $(BUILD)/faults.md

# Every pair of the kill matrix (tests/kill; make test runs one case per
# entry point); the results table goes to build/kill.md.
kill-matrix: all
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/kill.jsonl
	KVFERRY_KILL_FULL=1 KVFERRY_KILL_RESULTS=$(CURDIR)/$(BUILD)/kill.jsonl $(NETNS) tests/kill/run.sh
	tests/kill/table.py $(BUILD)/kill.jsonl | tee $(BUILD)/kill.md

# The soak (tests/soak; make test runs 50 s of it): SOAK_DURATION (1h),
# samples every 10 s, a peer restart every 3 min throughout, growth judged
# after SOAK_WARMUP (5 min); build/soak.tsv and build/soak.png.
SOAK_DURATION ?= 1h
SOAK_WARMUP ?= 5m
soak: all
	KVFERRY_SOAK_DURATION=$(SOAK_DURATION) KVFERRY_SOAK_WARMUP=$(SOAK_WARMUP) KVFERRY_SOAK_SAMPLE=10s KVFERRY_SOAK_RSS_SLACK=0 \
	  KVFERRY_SOAK_RESTART=3m KVFERRY_SOAK_RESTART_UNTIL=$(SOAK_DURATION) $(NETNS) tests/soak/run.sh

# The library with Go's -asan, the C, NIXL and TensorRT-LLM suites with
# their programs and the fake CUDA driver under ASan + UBSan (build-asan/).
asan: headers
	scripts/asan.sh

# A GPU or RDMA day (docs/guide/operating.md "Hardware check"): every suite
# that runs on the fake CUDA driver or the fake verbs provider, run on this
# machine's real drivers and NICs, then bench/gpu.sh and bench/rdma.sh, in at
# most 10 minutes; the report is build/hw-report.md. Parts whose hardware is
# missing are skipped with the reason (exit 0). hw-check-build (needs Go)
# leaves the Go test binaries in build/hw/; hw-check builds them first where
# Go is, and otherwise runs what build/ holds. hw-rehearse runs it all on the
# fakes posing as hardware (checks the script here).
hw-check-build: all
	scripts/hw-check.sh build

hw-check:
	@if command -v $(GO) >/dev/null 2>&1; then $(MAKE) --no-print-directory hw-check-build; fi
	scripts/hw-check.sh run

hw-rehearse: all
	scripts/hw-check.sh rehearse

demo: all
	@scripts/demo.sh

demo-c: all
	@scripts/demo-c.sh

bench: all
	@bench/tcp.sh

# The store's disk tier against a sequential baseline of the same directory.
bench-ssd:
	@bench/ssd.sh

clean:
	rm -rf $(BUILD)

FORCE:
