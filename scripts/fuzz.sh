#!/usr/bin/env bash
# Go fuzz targets of every wire parser and decoder, and the fuzz driver
# over the C entry points (tests/cfuzz), in two forms:
#
#   scripts/fuzz.sh short   a few targets picked at random (the seed shows
#                           which; FUZZ_SEED=N repeats it), briefly: make test
#   scripts/fuzz.sh long    every target: parsers to FUZZ_PARSER_EXECS
#                           executions (10 million; or FUZZ_PARSER_SECS of
#                           running if that comes first, when set), stateful
#                           targets (the master service, the mux and data-port
#                           servers, the RPC dispatcher, restore, HTTP server,
#                           C API) to FUZZ_STATE_EXECS (1 million) or
#                           FUZZ_STATE_SECS (an hour) of running, whichever
#                           comes first: make fuzz-long
#
# Budgets are execution counts, never durations (see the Makefile's note on
# go.dev/issue/75804); a target with a time budget (stateful ones, and
# parsers when FUZZ_PARSER_SECS is set) gets its rate in a short calibration
# run (20,000 executions; FUZZ_CALIBRATE_EXECS, 200,000, for parsers) times
# its seconds, capped at its execution count; the calibration run's
# executions and seconds count in the totals.
# FUZZ_ONLY=REGEX limits the long form to the matching "package target"
# lines, and FUZZ_CFUZZ_CALLS=0 leaves the C driver out.
# The long form records target, executions, seconds, rate and corpus size
# in build/fuzz-long.tsv and keeps each target's corpus in
# build/fuzz-corpus/<package>/<target> (restored into Go's fuzz cache before
# each run, so a cleaned cache loses nothing). Findings are failing inputs
# Go writes to the package's testdata/fuzz/<target>: commit them with the
# fix, and they run as regression tests in every go test.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-short}"
MOD=github.com/kvferry/kvferry

# package target kind (parser or state)
TARGETS="
engine/transport/tcp/tcpwire FuzzDecodeHeader parser
engine/transport/tcp/tcpwire FuzzDecodeStatus parser
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
engine/metadata/open FuzzParse parser
engine/peerauth FuzzServer state
engine/transport/samehost FuzzWire parser
engine/transport/samehost FuzzExportWire parser
engine/transport/rdma/handshake FuzzDecodeHandshake parser
engine/transport/rdma/priority FuzzParseMatrix parser
engine/transport/rdma/ibv FuzzParseGID parser
store/wire FuzzMessages parser
store/wire FuzzParseMuxError parser
store/wire FuzzCheckShape parser
store/wire FuzzServeMuxConn state
store/master FuzzService state
store/master FuzzRestore state
store/oplog/frame FuzzParseFrames parser
store/oplog/frame FuzzParseSnapshot parser
store/ha/haaddr FuzzParseEndpoints parser
agent/nixl/publicdata FuzzParsePublicData parser
agent/nixl FuzzParseOptions parser
agent/trtllm FuzzParseOptions parser
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

# median_rate log: the median of the rates Go printed for its 3 s
# intervals (the last line, a partial interval, left out); empty if none.
median_rate() {
  { grep -o 'execs: [0-9]* ([0-9]*/sec)' "$1" || true; } | sed '$d' | sed 's/.*(\([0-9]*\)\/sec)/\1/' | sort -n |
    awk '{ r[NR] = $1 } END { if (NR) print r[int((NR + 1) / 2)] }'
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
  mkdir -p build/fuzz-corpus
  tsv=build/fuzz-long.tsv
  printf 'target\texecutions\tseconds\texec_per_s\tcorpus\n' > "$tsv"
  parser_execs=${FUZZ_PARSER_EXECS:-10000000}
  parser_secs=${FUZZ_PARSER_SECS:-}
  state_execs=${FUZZ_STATE_EXECS:-1000000}
  state_secs=${FUZZ_STATE_SECS:-3600}
  echo "fuzz long: parsers ${parser_execs} executions${parser_secs:+ or ${parser_secs} s}, stateful ${state_execs} or ${state_secs} s"
  echo "$TARGETS" | grep . | grep -E -- "${FUZZ_ONLY:-.}" | while read -r pkg target kind; do
    keep="build/fuzz-corpus/$pkg/$target"
    mkdir -p "$keep" "$cache/$pkg/$target"
    cp -n "$keep"/* "$cache/$pkg/$target/" 2>/dev/null || true
    execs=$parser_execs cal_execs=0 cal_secs=0
    budget=$parser_secs cal=${FUZZ_CALIBRATE_EXECS:-200000} cap=$parser_execs
    if [ "$kind" = state ]; then
      budget=$state_secs cal=20000 cap=$state_execs
    fi
    if [ -n "$budget" ]; then
      # Calibrate: the rate of a short run (Go's median rate over its 3 s
      # intervals, else the run's wall clock, build included), times the
      # time budget. The short run's executions count toward the total.
      log=$(mktemp)
      start=$(date +%s)
      if ! run_target "$pkg" "$target" "$cal" > "$log"; then
        cat "$log"
        echo "FAIL $pkg $target (failing input under $pkg/testdata/fuzz/$target)"
        exit 1
      fi
      cal_secs=$(( $(date +%s) - start ))
      cal_execs=$(last_execs "$log")
      rate=$(median_rate "$log")
      [ -n "$rate" ] || rate=$(( ${cal_execs:-0} / (cal_secs > 0 ? cal_secs : 1) ))
      rm -f "$log"
      execs=$(( rate * budget ))
      [ "$execs" -gt "$cap" ] && execs=$cap
      execs=$(( execs - ${cal_execs:-0} ))
      [ "$execs" -lt 0 ] && execs=0
    fi
    echo "=== $pkg $target: $(( execs + ${cal_execs:-0} )) executions"
    done_execs=0 secs=0
    if [ "$execs" -gt 0 ]; then
      log=$(mktemp)
      start=$(date +%s)
      if ! run_target "$pkg" "$target" "$execs" > "$log"; then
        cat "$log"
        echo "FAIL $pkg $target (failing input under $pkg/testdata/fuzz/$target)"
        exit 1
      fi
      secs=$(( $(date +%s) - start ))
      done_execs=$(last_execs "$log")
      tail -2 "$log"
      rm -f "$log"
    fi
    done_execs=$(( ${done_execs:-0} + ${cal_execs:-0} ))
    secs=$(( secs + cal_secs ))
    cp -n "$cache/$pkg/$target"/* "$keep/" 2>/dev/null || true
    corpus=$(ls "$keep" | wc -l)
    printf '%s %s\t%s\t%s\t%s\t%s\n' "$pkg" "$target" "$done_execs" "$secs" "$(( done_execs / (secs > 0 ? secs : 1) ))" "$corpus" >> "$tsv"
  done
  # The C entry points: a million calls of each API (about an hour's worth
  # on two loaded cores), FUZZ_CFUZZ_CALLS to change it; each run has a hang
  # guard of three times FUZZ_STATE_SECS, at least 15 minutes.
  cfuzz_calls=${FUZZ_CFUZZ_CALLS:-1000000}
  cfuzz_timeout=$(( state_secs * 3 > 900 ? state_secs * 3 : 900 ))
  if [ "$cfuzz_calls" -gt 0 ]; then
    make -s lib headers
    gcc -O1 -g -Wall -Wextra -Werror -std=gnu11 -Iinclude -o build/cfuzz tests/cfuzz/cfuzz.c -ldl -lpthread
    for api in te store; do
      arg=""
      [ "$api" = store ] && arg=store
      log=$(mktemp)
      start=$(date +%s)
      KVFERRY_LOG_LEVEL=off timeout "$cfuzz_timeout" build/cfuzz build/lib/libkvferry.so.1 "$RANDOM" "$cfuzz_calls" $arg | tee "$log"
      secs=$(( $(date +%s) - start ))
      calls=$(grep -o '^cfuzz: [0-9]*' "$log" | awk '{print $2}')
      printf 'tests/cfuzz %s\t%s\t%s\t%s\t-\n' "$api" "${calls:-0}" "$secs" "$(( ${calls:-0} / (secs > 0 ? secs : 1) ))" >> "$tsv"
      rm -f "$log"
    done
  fi
  echo
  cat "$tsv"
  ;;
*)
  echo "usage: scripts/fuzz.sh short|long" >&2
  exit 2
  ;;
esac
