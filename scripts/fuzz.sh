#!/usr/bin/env bash
# Go fuzz targets of every wire parser and decoder, and the fuzz driver
# over the C entry points (tests/cfuzz), in two forms:
#
#   scripts/fuzz.sh short   a few targets picked at random (the seed shows
#                           which; FUZZ_SEED=N repeats it), briefly: make test
#   scripts/fuzz.sh long    every target to its budget: parsers to
#                           FUZZ_PARSER_EXECS executions (10 million),
#                           stateful targets (the master service, the mux and
#                           data-port servers, the RPC dispatcher, restore,
#                           HTTP server) to FUZZ_STATE_EXECS (1 million) or
#                           FUZZ_STATE_SECS (an hour) of fuzzing, whichever
#                           comes first, the C driver to FUZZ_CFUZZ_CALLS (a
#                           million) calls per API: make fuzz-long
#
# The long form is resumable, and its progress lives in the repository:
# docs/reports/fuzz-ledger.tsv holds, per target, the executions, seconds
# and runs of every long run so far with the date and commit of the last,
# and each target's corpus is the package's testdata/fuzz/<target>, where
# go test expects it (every go test runs it as regression inputs). Commit
# both after a run. A run gives each target only what its budget still
# lacks, skips the targets that met it, and ends by printing every target's
# cumulative executions, budget and whether it is met.
#
# FUZZ_LONG_BUDGET=2h (or 90m, 600s, 1h30m, a bare number of seconds) is
# the run's wall time, builds included: it is split across the targets
# still short of their budgets (what one leaves unused goes to the next),
# and the run stops when it is spent; the ledger carries the rest to the
# next run. Without it the run goes until every budget is met.
#
# Corpus entries are what Go's fuzz cache holds ($(go env GOCACHE)/fuzz):
# Go writes an input there only when it adds coverage (minimized first).
# Entries written by this run that the testdata directory lacks are
# copied to it, smallest first,
# within caps: FUZZ_CORPUS_ENTRY_BYTES (4096) per entry,
# FUZZ_CORPUS_TARGET_ENTRIES (100) and FUZZ_CORPUS_TARGET_BYTES (65536)
# per target, FUZZ_CORPUS_TOTAL_BYTES (1.5 MiB) over the repository
# (internal/lint fails above 2 MiB). While a target runs, its ledger line
# and corpus are brought up to date every FUZZ_LEDGER_EVERY seconds (10),
# so a run that is killed keeps what it did but the last few seconds;
# SIGINT or SIGTERM stops the running target and records it. Targets run
# most-lacking first (the ledger's rate times what is missing; never-run
# targets first); FUZZ_SLICE_SECS=N gives each at most N seconds of
# fuzzing in this run (a pass over all of them), FUZZ_ONLY=REGEX limits the
# run to the matching "package target kind" lines and FUZZ_SKIP=REGEX
# leaves matching ones out (the C driver's lines are "tests/cfuzz te
# cfuzz" and "tests/cfuzz store cfuzz"), FUZZ_CFUZZ_CALLS=0 leaves the C
# driver out. Each package's test binary is built first (go test -c
# -fuzz, FUZZ_BUILD_SECS at most), outside the target's share, and the
# share is wall time from the binary's start, enforced by timeout(1):
# SIGINT to the coordinator at the end of the share (Go then prints its
# final count and nothing else), SIGKILL FUZZ_STOP_GRACE (20) seconds
# later, so a target never runs much past its share however loaded the
# machine. Budgets are execution counts given to the binary, never
# durations (see the Makefile's note on go.dev/issue/75804).
# build/fuzz-long.tsv holds this run's own counts. Findings
# are failing inputs Go writes to the package's testdata/fuzz/<target>:
# commit them with the fix, and they run as regression tests in every
# go test.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-short}"
MOD=github.com/kvferry/kvferry

# package target kind (parser or state)
TARGETS="
engine/transport/tcp/tcpwire FuzzDecodeHeader parser
engine/transport/tcp/tcpwire FuzzDecodeStatus parser
engine/transport/tcp/tcpwire FuzzDecodeHello parser
engine/transport/tcp FuzzServeConn state
engine/rpc/rpcframe FuzzDecodeFrame parser
engine/notifywire FuzzDecodeNotify parser
engine FuzzHandleRPC state
engine/descriptor FuzzUnmarshal parser
engine/descriptor FuzzParseP2PName parser
engine/metadata FuzzFetch state
engine/metadata/http FuzzClientReply parser
engine/metadata/http FuzzServerRoundTrip state
engine/metadata/http FuzzJournalReplay state
engine/metadata/connstr FuzzParse parser
engine/peerauth FuzzServer state
engine/transport/samehost/shwire FuzzWire parser
engine/transport/samehost/shwire FuzzExportWire parser
engine/transport/samehost/nring FuzzDrain parser
engine/transport/samehost FuzzParseFDPid parser
engine/transport/rdma/handshake FuzzDecodeHandshake parser
engine/transport/rdma/priority FuzzParseMatrix parser
engine/transport/rdma/ibv FuzzParseGID parser
engine/transport/efa FuzzParsePublished parser
store/wire FuzzMessages parser
store/wire FuzzParseMuxError parser
store/wire FuzzDecodeReplicaList parser
store/wire FuzzParseKeyRequest parser
store/wire FuzzDecodePutCommitRequest parser
store/wire FuzzDecodePutCommitResponse parser
store/wire/shape FuzzCheckShape parser
store/wire/structpack FuzzUnmarshal parser
store/wire/coro FuzzMessages parser
store/wire/coro FuzzReadRequest parser
store/wire/coro FuzzReadResponse parser
store/client FuzzDiskWire parser
store/wire FuzzServeMuxConn state
store/master FuzzService state
store/master FuzzRestore state
store/master FuzzCoroCall state
store/oplog/frame FuzzParseFrames parser
store/oplog/frame FuzzParseSnapshot parser
store/ha/haaddr FuzzParseEndpoints parser
agent/nixl/publicdata FuzzParsePublicData parser
agent/nixl/nixlopt FuzzParseOptions parser
agent/trtllm/trtllmopt FuzzParseOptions parser
"

NETNS=scripts/in-netns.sh
cache="$(go env GOCACHE)/fuzz/$MOD"

# run_target pkg target execs [log]: fuzzes one target; prints its log.
# A target the package does not have fails (go test would pass).
run_target() {
  local pkg=$1 target=$2 execs=$3 out rc=0
  out=$($NETNS go test -run '^$' -fuzz "^${target}\$" -fuzztime "${execs}x" -parallel "${FUZZ_PARALLEL:-2}" "./$pkg" 2>&1) || rc=$?
  echo "$out"
  if echo "$out" | grep -q 'no fuzz tests to fuzz'; then
    echo "fuzz: $pkg has no fuzz target $target"
    return 1
  fi
  return $rc
}

# last_execs log: the final execution count Go printed.
last_execs() { { grep -o 'execs: [0-9]*' "$1" || true; } | tail -1 | awk '{print $2}'; }

ledger=${FUZZ_LEDGER:-docs/reports/fuzz-ledger.tsv}
ledger_head='target	kind	executions	seconds	wall_seconds	runs	corpus	updated_utc	commit'
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

# ledger_get key: "executions seconds wall_seconds runs" of key so far
# (zeros if none). seconds are fuzzing time as Go counts it (from the
# start of its baseline run); wall_seconds add the test binary's build.
ledger_get() {
  awk -F'\t' -v k="$1" '$1 == k { e = $3; s = $4; w = $5; r = $6 } END { print e + 0, s + 0, w + 0, r + 0 }' "$ledger"
}

# ledger_put key kind executions seconds wall_seconds runs corpus: sets key's
# line, dated now and stamped with the commit fuzzed (written beside the
# ledger and renamed over it: a kill leaves the old or the new ledger, never
# half of one). Lines stay in list order.
ledger_put() {
  local tmp="$ledger.tmp.$$"
  awk -F'\t' -v OFS='\t' -v k="$1" -v kind="$2" -v e="$3" -v s="$4" -v w="$5" -v r="$6" -v c="$7" -v u="$(date -u +%FT%TZ)" -v g="$commit" '
    NR == 1 { print; next }
    $1 == k { if (!done) print k, kind, e, s, w, r, c, u, g; done = 1; next }
    { print }
    END { if (!done) print k, kind, e, s, w, r, c, u, g }' "$ledger" | { IFS= read -r h; echo "$h"; sort; } > "$tmp"
  mv -f "$tmp" "$ledger"
}

# keep_corpus pkg target stamp: copies the entries of Go's fuzz cache for
# target that this run wrote (newer than the stamp file: each is an input
# the fuzzer found to add coverage) and pkg/testdata/fuzz/target lacks into
# it, smallest first,
# within the caps (per entry, per target, over the repository); prints the
# entries it holds then. Go names an entry by its content's hash, so a
# name already there is the same input. An entry must have the argument
# types of the target as it is now: those of the entries kept before, or
# of those this run wrote (newer than the stamp file); an older cache
# entry of another signature would fail every go test. With "any" for
# stamp, every type is taken (seed_corpus checks them with go test).
keep_corpus() {
  local pkg=$1 target=$2 stamp=$3 dir="$1/testdata/fuzz/$2" src="$cache/$1/$2"
  local ecap=${FUZZ_CORPUS_ENTRY_BYTES:-4096} ncap=${FUZZ_CORPUS_TARGET_ENTRIES:-100}
  local bcap=${FUZZ_CORPUS_TARGET_BYTES:-65536} tcap=${FUZZ_CORPUS_TOTAL_BYTES:-1572864}
  local n bytes total size name ref
  if [ -d "$src" ]; then
    mkdir -p "$dir"
    n=$(find "$dir" -type f | wc -l)
    bytes=$(find "$dir" -type f -printf '%s\n' | awk '{ t += $1 } END { print t + 0 }')
    total=$(corpus_bytes)
    ref=$(find "$dir" -type f | head -1)
    [ -n "$ref" ] || [ "$stamp" = any ] || ref=$(find "$src" -maxdepth 1 -type f -newer "$stamp" | head -1)
    [ -n "$ref" ] && ref=$(entry_sig "$ref")
    while read -r size name; do
      [ -n "$name" ] || continue
      [ -e "$dir/$name" ] && continue
      [ "$size" -le "$ecap" ] || continue
      [ "$stamp" = any ] || { [ "$src/$name" -nt "$stamp" ] && [ -n "$ref" ] && [ "$(entry_sig "$src/$name")" = "$ref" ]; } || continue
      [ "$n" -lt "$ncap" ] && [ $(( bytes + size )) -le "$bcap" ] && [ $(( total + size )) -le "$tcap" ] || break
      cp "$src/$name" "$dir/$name.tmp" && mv -f "$dir/$name.tmp" "$dir/$name"
      n=$(( n + 1 )) bytes=$(( bytes + size )) total=$(( total + size ))
    done < <(find "$src" -maxdepth 1 -type f -printf '%s %f\n' | sort -n -k1,1 -k2,2)
    rmdir "$dir" 2>/dev/null || true
  fi
  find "$dir" -type f 2>/dev/null | wc -l
}

# seed_corpus pkg target: with FUZZ_SEED_FROM_CACHE=1, a target without a
# committed corpus takes what Go's fuzz cache already holds for it (runs
# before this ledger's, found on this machine), checked by running the
# target's inputs with go test (a test build of its own: at nice 19 on a
# loaded machine it can take many minutes, hence opt-in); if that fails
# (entries of an older signature), none are kept.
seed_corpus() {
  local pkg=$1 target=$2 dir="$1/testdata/fuzz/$2" n out
  [ "${FUZZ_SEED_FROM_CACHE:-0}" = 1 ] || return 0
  [ -z "$(find "$dir" -type f 2>/dev/null | head -1)" ] || return 0
  [ -n "$(find "$cache/$pkg/$target" -maxdepth 1 -type f 2>/dev/null | head -1)" ] || return 0
  n=$(keep_corpus "$pkg" "$target" any)
  [ "$n" -gt 0 ] || return 0
  if out=$(timeout 600 $NETNS go test -count=1 -run "^${target}\$" "./$pkg" 2>&1); then
    echo "seeded $dir with $n entries of the fuzz cache"
  else
    echo "$out" | tail -5
    echo "fuzz: the fuzz cache's entries fail $target; none kept"
    rm -rf "$dir"
  fi
}

# entry_sig file: a corpus entry's argument types ("[]byte,uint64,").
entry_sig() { awk 'NR == 1 && $0 != "go test fuzz v1" { exit } NR > 1 { sub(/\(.*/, ""); printf "%s,", $0 }' "$1"; }

# corpus_bytes: the bytes of every committed fuzz corpus (testdata/fuzz).
corpus_bytes() {
  find . -path ./build -prune -o -path '*/testdata/fuzz/*' -type f -printf '%s\n' | awk '{ t += $1 } END { print t + 0 }'
}

# parse_secs duration: seconds of 2h, 90m, 45s, 1h30m or a bare number.
parse_secs() {
  local d=$1 v=0 n u
  if [[ $d =~ ^[0-9]+$ ]]; then echo "$d"; return; fi
  [[ $d =~ ^([0-9]+[hms])+$ ]] || { echo "fuzz: bad FUZZ_LONG_BUDGET $d (want 2h, 90m, 600s, 1h30m or seconds)" >&2; return 1; }
  while [[ $d =~ ^([0-9]+)([hms])(.*)$ ]]; do
    n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]} d=${BASH_REMATCH[3]}
    case $u in h) v=$(( v + n * 3600 )) ;; m) v=$(( v + n * 60 )) ;; s) v=$(( v + n )) ;; esac
  done
  echo "$v"
}

# budget_left kind executions seconds: "executions seconds" still lacking
# (seconds: - for parsers, which have no time budget); both <= 0 or an
# execution count <= 0 means met.
budget_left() {
  case "$1" in
  parser) echo "$(( parser_execs - $2 )) -" ;;
  state) echo "$(( state_execs - $2 )) $(( state_secs - $3 ))" ;;
  cfuzz) echo "$(( cfuzz_calls - $2 )) -" ;;
  esac
}

# is_met kind executions seconds
is_met() {
  local left secs
  read -r left secs <<< "$(budget_left "$@")"
  [ "$left" -le 0 ] || { [ "$secs" != - ] && [ "$secs" -le 0 ]; }
}

# shortfall_secs kind executions seconds: the seconds the target still
# needs at its ledger rate (a large number for a target never run).
shortfall_secs() {
  local left secs need
  read -r left secs <<< "$(budget_left "$@")"
  if [ "$2" -le 0 ] || [ "$3" -le 0 ]; then echo 999999999; return; fi
  need=$(( left * $3 / $2 ))
  [ "$secs" != - ] && [ "$secs" -lt "$need" ] && need=$secs
  echo "$need"
}

# stop_child: ends the running target. SIGINT goes to the fuzzing
# coordinator only (the test binary without -test.fuzzworker; not the
# timeout(1) above it), which stops its workers, prints its last count and
# exits: a worker that got the signal itself would die first, and the
# coordinator would report a crash and write the input it was running as a
# failing one. A coordinator still there FUZZ_STOP_GRACE seconds (20)
# later is killed, then the whole group: SIGKILL leaves no failing input
# (a killed coordinator writes nothing), and the count is the last one it
# printed. For the C driver, and before the coordinator exists, the whole
# process group gets SIGINT.
child=""
deadline=0
stop_child() {
  [ -n "$child" ] || return 0
  local coord i grace=${FUZZ_STOP_GRACE:-20}
  coord=$(ps -e -o pid=,pgid=,args= | awk -v g="$child" '$2 == g && $3 !~ /(^|\/)timeout$/ && /-test\.fuzz=/ && !/-test\.fuzzworker/ { print $1 }')
  if [ -n "$coord" ]; then
    kill -INT $coord 2>/dev/null || true
  else
    kill -INT -- "-$child" 2>/dev/null || true
  fi
  for (( i = 0; i < grace; i++ )); do kill -0 -- "-$child" 2>/dev/null || break; sleep 1; done
  [ -z "$coord" ] || kill -KILL $coord 2>/dev/null || true
  kill -KILL -- "-$child" 2>/dev/null || true
  wait "$child" 2>/dev/null || true
  child=""
}
stopping=""
on_signal() { stopping=1; }

# last_secs log: the last elapsed time Go printed, in seconds.
last_secs() {
  { grep -o 'elapsed: [0-9hms.]*' "$1" || true; } | tail -1 | awk '{
    t = $2; n = 0; v = 0
    while (match(t, /^[0-9.]+[hms]/)) {
      u = substr(t, RLENGTH, 1); x = substr(t, 1, RLENGTH - 1) + 0
      v += (u == "h" ? 3600 : u == "m" ? 60 : 1) * x; t = substr(t, RLENGTH + 1)
    }
    printf "%d\n", v }'
}

# build_bin pkg target: builds pkg's fuzzing test binary (go test -c
# -fuzz, which instruments the package for coverage as go test -fuzz does)
# once per run into build/fuzzbin, within FUZZ_BUILD_SECS (900) and the
# run's deadline, so that a slow build on a loaded machine never eats a
# target's share of fuzzing; prints the binary's path. Returns 2 when the
# deadline came first, 1 when the build failed (its output printed).
build_bin() {
  local pkg=$1 target=$2 bin="build/fuzzbin/${1//\//_}.test" lim=${FUZZ_BUILD_SECS:-900} out rc=0
  if [ ! -x "$bin" ]; then
    [ "$deadline" -gt 0 ] && [ $(( deadline - $(date +%s) )) -lt "$lim" ] && lim=$(( deadline - $(date +%s) ))
    [ "$lim" -ge 1 ] || return 2
    mkdir -p build/fuzzbin
    out=$(timeout -k 10 "$lim" go test -c -fuzz "^${target}\$" -o "$bin.tmp" "./$pkg" 2>&1) || rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      echo "fuzz: building $pkg's test binary took more than $lim s" >&2
      [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ] && return 2
      return 1
    fi
    [ "$rc" -eq 0 ] || { echo "$out" >&2; return 1; }
    mv -f "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

# fuzz_one pkg target kind [share]: runs one target for what its budget
# lacks (FUZZ_SLICE_SECS of fuzzing at most, and share seconds of fuzzing
# if above 0), never past the run's deadline (FUZZ_LONG_BUDGET), keeping
# the ledger and the committed corpus up to date. The binary is built
# first (build_bin); the cap is wall time from its start, enforced by
# timeout(1) around the coordinator (SIGINT at the cap, SIGKILL
# FUZZ_STOP_GRACE seconds later) and by this loop, so a starved
# coordinator that prints nothing for minutes still stops on time. Its
# fuzz time stays an execution count (-test.fuzztime Nx, what the budget
# lacks): a duration can fail a busy target falsely (the Makefile's note
# on go.dev/issue/75804). The executions counted are the last count the
# coordinator printed: its final one when the stop was a SIGINT.
fuzz_one() {
  local pkg=$1 target=$2 kind=$3 share=${4:-0} key="$1 $2" e0 s0 w0 r0 left secs cap log stamp start fstart fend wall execs napper woke wst fsecs=0 nap corpus=0 rc=0 stopped="" tick=0 bin brc=0 grace=${FUZZ_STOP_GRACE:-20}
  read -r e0 s0 w0 r0 <<< "$(ledger_get "$key")"
  read -r left secs <<< "$(budget_left "$kind" "$e0" "$s0")"
  cap=${FUZZ_SLICE_SECS:-0}
  if [ "$secs" != - ] && { [ "$cap" -eq 0 ] || [ "$secs" -lt "$cap" ]; }; then cap=$secs; fi
  local msg
  msg="=== $key: $e0 executions so far, $left to go"
  [ "$share" -gt 0 ] && { [ "$cap" -eq 0 ] || [ "$share" -lt "$cap" ]; } && cap=$share
  [ "$cap" -gt 0 ] && msg="$msg, at most ${cap} s of fuzzing now"
  echo "$msg"
  seed_corpus "$pkg" "$target"
  start=$(date +%s)
  bin=$(build_bin "$pkg" "$target") || brc=$?
  if [ "$brc" -eq 2 ]; then echo "fuzz long: the budget ended while building $pkg"; return 0; fi
  [ "$brc" -eq 0 ] || { echo "FAIL $key (test binary build)"; return 1; }
  if [ "$deadline" -gt 0 ]; then
    local rest=$(( deadline - $(date +%s) ))
    [ "$rest" -ge 1 ] || { echo "fuzz long: the budget ended while building $pkg"; return 0; }
    { [ "$cap" -eq 0 ] || [ "$rest" -lt "$cap" ]; } && cap=$rest
  fi
  local -a bound=()
  [ "$cap" -gt 0 ] && bound=(timeout --foreground -s INT -k "$grace" "$cap")
  log=$(mktemp)
  stamp=$(mktemp)
  fstart=$(date +%s)
  # In its own process group (setsid), so a stop reaches the workers too;
  # in the package's directory, as go test runs it (testdata/fuzz), with
  # the fuzz cache go test would give it. No -test.timeout: an hour of
  # fuzzing is no hang.
  setsid $NETNS bash -c 'cd "$0" && exec "$@"' "$pkg" "${bound[@]}" "$PWD/$bin" -test.run='^$' -test.fuzz="^${target}\$" \
    -test.fuzztime="${left}x" -test.timeout=0 -test.parallel="${FUZZ_PARALLEL:-2}" -test.fuzzcachedir="$cache/$pkg" > "$log" 2>&1 &
  child=$!
  while [ -n "$child" ]; do
    # Sleep to the next ledger update, or sooner to stop on time.
    nap=${FUZZ_LEDGER_EVERY:-10}
    [ "$deadline" -gt 0 ] && [ $(( deadline - $(date +%s) )) -lt "$nap" ] && nap=$(( deadline - $(date +%s) ))
    [ "$nap" -ge 1 ] || nap=1
    # Wake when the nap ends or the target does, whichever is first.
    # (wait -n reaps what it reports, so the target's status is taken here.)
    sleep "$nap" &
    napper=$!
    woke="" wst=0
    wait -n -p woke "$napper" "$child" || wst=$?
    if [ "$woke" = "$child" ]; then
      rc=$wst child=""
      kill "$napper" 2>/dev/null || true
      wait "$napper" 2>/dev/null || true
      break
    fi
    execs=$(last_execs "$log") fsecs=$(last_secs "$log") wall=$(( $(date +%s) - start ))
    tick=$(( tick + 1 ))
    [ $(( tick % 6 )) -eq 1 ] && corpus=$(keep_corpus "$pkg" "$target" "$stamp")
    ledger_put "$key" "$kind" "$(( e0 + ${execs:-0} ))" "$(( s0 + ${fsecs:-0} ))" "$(( w0 + wall ))" "$(( r0 + 1 ))" "$corpus"
    # A signal, the run's deadline, or a coordinator timeout(1) failed to
    # end within its grace: stop it here.
    if [ -n "$stopping" ] || { [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; } ||
      { [ "$cap" -gt 0 ] && [ $(( $(date +%s) - fstart )) -ge $(( cap + grace + 5 )) ]; }; then
      stopped=1
      stop_child
      break
    fi
  done
  if [ -n "$child" ]; then wait "$child" || rc=$?; child=""; fi
  fend=$(date +%s)
  # timeout(1) ends with 124 when the cap stopped the coordinator, 137
  # when it had to kill it.
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then stopped=1; fi
  execs=$(last_execs "$log") fsecs=$(last_secs "$log") wall=$(( $(date +%s) - start ))
  corpus=$(keep_corpus "$pkg" "$target" "$stamp")
  rm -f "$stamp"
  ledger_put "$key" "$kind" "$(( e0 + ${execs:-0} ))" "$(( s0 + ${fsecs:-0} ))" "$(( w0 + wall ))" "$(( r0 + 1 ))" "$corpus"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$key" "${execs:-0}" "${fsecs:-0}" "$(( fend - fstart ))" "$(( ${execs:-0} / (${fsecs:-0} > 0 ? ${fsecs:-0} : 1) ))" "$corpus" >> "$tsv"
  if grep -q 'no fuzz tests to fuzz' "$log"; then
    cat "$log"; rm -f "$log"
    echo "fuzz: $pkg has no fuzz target $target"
    return 1
  fi
  # A run stopped from outside ends without a finding; a finding is a
  # failing input Go wrote (or a failure it printed).
  if grep -q -e 'Failing input written to' -e '^--- FAIL' "$log" || { [ -z "$stopped" ] && [ "$rc" -ne 0 ]; }; then
    cat "$log"; rm -f "$log"
    echo "FAIL $key (failing input under $pkg/testdata/fuzz/$target)"
    return 1
  fi
  if [ -n "$stopped" ]; then
    echo "stopped after $(( fend - fstart )) s (cap ${cap} s; Go counted ${fsecs:-0} s of fuzzing), ${wall} s with the build: ${execs:-0} executions"
  else
    tail -2 "$log"
  fi
  rm -f "$log"
}

# cfuzz_one api [wallcap]: the C driver over one API in chunks of
# FUZZ_CFUZZ_CHUNK calls (it reports its count when it ends), each chunk
# recorded in the ledger; a chunk cut short by a stop counts nothing. With
# a wall cap (seconds, above 0) a chunk is sized at the ledger's rate to
# end within it.
cfuzz_one() {
  local api=$1 wallcap=${2:-0} key="tests/cfuzz $1" e0 s0 w0 r0 left secs chunk log start elapsed calls arg="" rc cap=${FUZZ_SLICE_SECS:-0} t0 rest rate
  [ "$api" = store ] && arg=store
  read -r e0 s0 w0 r0 <<< "$(ledger_get "$key")"
  t0=$(date +%s)
  r0=$(( r0 + 1 ))
  echo "=== $key: $e0 calls so far"
  while [ -z "$stopping" ] && ! is_met cfuzz "$e0" "$s0"; do
    read -r left secs <<< "$(budget_left cfuzz "$e0" "$s0")"
    chunk=${FUZZ_CFUZZ_CHUNK:-20000}
    [ "$left" -lt "$chunk" ] && chunk=$left
    if [ "$wallcap" -gt 0 ]; then
      rest=$(( wallcap - ($(date +%s) - t0) ))
      [ "$rest" -ge 5 ] || break
      rate=1000
      [ "$s0" -gt 0 ] && [ "$e0" -gt 0 ] && rate=$(( e0 / s0 ))
      [ $(( rate * rest * 3 / 4 )) -lt "$chunk" ] && chunk=$(( rate * rest * 3 / 4 ))
      [ "$chunk" -ge 200 ] || chunk=200
    fi
    log=$(mktemp)
    start=$(date +%s)
    KVFERRY_LOG_LEVEL=off setsid timeout 900 build/cfuzz build/lib/libkvferry.so.1 "$RANDOM" "$chunk" $arg > "$log" 2>&1 &
    child=$!
    rc=0
    wait "$child" || rc=$?
    if [ -n "$stopping" ]; then stop_child; rm -f "$log"; break; fi
    child=""
    if [ "$rc" -ne 0 ]; then cat "$log"; rm -f "$log"; echo "FAIL $key"; return 1; fi
    elapsed=$(( $(date +%s) - start ))
    calls=$(grep -o '^cfuzz: [0-9]*' "$log" | awk '{print $2}')
    tail -1 "$log"
    rm -f "$log"
    e0=$(( e0 + ${calls:-0} )) s0=$(( s0 + elapsed )) w0=$(( w0 + elapsed ))
    ledger_put "$key" cfuzz "$e0" "$s0" "$w0" "$r0" -
    printf '%s\t%s\t%s\t%s\t%s\t-\n' "$key" "${calls:-0}" "$elapsed" "$elapsed" "$(( ${calls:-0} / (elapsed > 0 ? elapsed : 1) ))" >> "$tsv"
    [ "$wallcap" -gt 0 ] && [ $(( $(date +%s) - t0 )) -ge "$wallcap" ] && break
    [ "$cap" -gt 0 ] && [ $(( $(date +%s) - t0 )) -ge "$cap" ] && break
  done
  return 0
}

# summary: every target's totals, budget and whether it is met, and the
# hours still needed at the ledger's rates.
summary() {
  local pkg target kind key e s w r budget met need total=0 unknown=0
  printf '\n%-58s %6s %12s %8s %22s %s\n' target kind executions seconds budget met
  while read -r pkg target kind; do
    key="$pkg $target"
    read -r e s w r <<< "$(ledger_get "$key")"
    case "$kind" in
    parser) budget="$parser_execs" ;;
    state) budget="$state_execs or ${state_secs}s" ;;
    cfuzz) budget="$cfuzz_calls" ;;
    esac
    if is_met "$kind" "$e" "$s"; then met=met; else
      met="NOT met"
      need=$(shortfall_secs "$kind" "$e" "$s")
      if [ "$need" -ge 999999999 ]; then unknown=$(( unknown + 1 )); else total=$(( total + need )); fi
    fi
    printf '%-58s %6s %12s %8s %22s %s\n' "$key" "$kind" "$e" "$s" "$budget" "$met"
  done < <(all_targets)
  printf 'still needed at the ledger rates: %d.%d hours' $(( total / 3600 )) $(( total % 3600 * 10 / 3600 ))
  [ "$unknown" -gt 0 ] && printf ' (and %d targets never run)' "$unknown"
  echo
}

# all_targets: "package target kind" lines, the C driver's two APIs last.
all_targets() {
  { echo "$TARGETS"; [ "$cfuzz_calls" -le 0 ] || printf 'tests/cfuzz te cfuzz\ntests/cfuzz store cfuzz\n'; } |
    grep . | grep -E -- "${FUZZ_ONLY:-.}" | grep -vE -- "${FUZZ_SKIP:-^$}" || true
}

long_form() {
  parser_execs=${FUZZ_PARSER_EXECS:-10000000}
  state_execs=${FUZZ_STATE_EXECS:-1000000}
  state_secs=${FUZZ_STATE_SECS:-3600}
  cfuzz_calls=${FUZZ_CFUZZ_CALLS:-1000000}
  local budget=0 rest n slice
  if [ -n "${FUZZ_LONG_BUDGET:-}" ]; then
    budget=$(parse_secs "$FUZZ_LONG_BUDGET") || exit 2
    deadline=$(( $(date +%s) + budget ))
  fi
  mkdir -p build "$(dirname "$ledger")"
  [ -s "$ledger" ] || echo "$ledger_head" > "$ledger"
  if ! head -1 "$ledger" | grep -q '	commit$'; then
    echo "fuzz: $ledger has an old header (want: $ledger_head)" >&2
    exit 2
  fi
  tsv=build/fuzz-long.tsv
  printf 'target\texecutions\tseconds\tfuzz_wall_seconds\texec_per_s\tcorpus\n' > "$tsv"
  rm -rf build/fuzzbin
  trap on_signal INT TERM
  trap stop_child EXIT
  echo "fuzz long: parsers ${parser_execs} executions, stateful ${state_execs} or ${state_secs} s, C driver ${cfuzz_calls} calls per API${FUZZ_SLICE_SECS:+, at most ${FUZZ_SLICE_SECS} s per target now}${FUZZ_LONG_BUDGET:+, ${budget} s in all now}; ledger $ledger"
  if [ "$cfuzz_calls" -gt 0 ] && all_targets | grep -q ' cfuzz$'; then
    make -s lib headers
    gcc -O1 -g -Wall -Wextra -Werror -std=gnu11 -Iinclude -Itests/c -o build/cfuzz tests/cfuzz/cfuzz.c -ldl -lpthread
  fi
  local pkg target kind e s w r order
  # Most-lacking first: seconds still needed at the ledger rate (targets
  # never run first, in list order).
  order=$(all_targets | while read -r pkg target kind; do
    read -r e s w r <<< "$(ledger_get "$pkg $target")"
    is_met "$kind" "$e" "$s" && continue
    printf '%s\t%s %s %s\n' "$(shortfall_secs "$kind" "$e" "$s")" "$pkg" "$target" "$kind"
  done | sort -s -t"$(printf '\t')" -k1,1nr | cut -f2)
  # With a budget, each target gets an equal share of what is left of it
  # (a target that ends early leaves its rest to the others), but never
  # less than FUZZ_MIN_SLICE_SECS (20): the run ends when less than that is
  # left, and the targets it did not reach come first in the next run.
  n=$(grep -c . <<< "$order" || true)
  slice=0
  while read -r pkg target kind; do
    [ -n "$pkg" ] || continue
    [ -z "$stopping" ] || break
    if [ "$deadline" -gt 0 ]; then
      rest=$(( deadline - $(date +%s) ))
      slice=$(( rest / (n > 0 ? n : 1) ))
      if [ "$rest" -lt "${FUZZ_MIN_SLICE_SECS:-20}" ]; then
        echo "fuzz long: budget spent (${budget} s); $n targets wait for the next run"
        break
      fi
      [ "$slice" -ge "${FUZZ_MIN_SLICE_SECS:-20}" ] || slice=${FUZZ_MIN_SLICE_SECS:-20}
    fi
    n=$(( n - 1 ))
    if [ "$kind" = cfuzz ]; then
      cfuzz_one "$target" "$slice" || exit 1
    else
      fuzz_one "$pkg" "$target" "$kind" "$slice" || exit 1
    fi
  done <<< "$order"
  summary
  [ -z "$stopping" ] || echo "fuzz long: stopped by a signal; the ledger holds what ran"
}

case "$mode" in
short)
  seed="${FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
  n="${FUZZ_SHORT_TARGETS:-2}"
  echo "fuzz short: $n targets picked with seed $seed (FUZZ_SEED=$seed repeats it)"
  echo "$TARGETS" | grep . | awk -v seed="$seed" 'BEGIN { srand(seed) } { print rand() "\t" $0 }' | sort -n | cut -f2 | head -n "$n" |
  while read -r pkg target kind; do
    execs=${FUZZ_SHORT_EXECS:-20000}
    [ "$kind" = state ] && execs=${FUZZ_SHORT_STATE_EXECS:-3000}
    echo "--- $pkg $target ($execs)"
    out=$(run_target "$pkg" "$target" "$execs") || { echo "$out"; exit 1; }
    echo "$out" | tail -2
  done
  ;;
long)
  long_form
  ;;
*)
  echo "usage: scripts/fuzz.sh short|long" >&2
  exit 2
  ;;
esac
