# Sourced by the bench scripts: the machine's round-trip floor, the
# baseline every latency figure is printed against.
#
# floor_measure builds bench/pingpong.c and runs it: two processes, a 4 KiB
# request and an 8-byte answer over loopback TCP, one in flight, with
# blocking reads (each side parks in the kernel: two thread wake-ups per
# round trip) and with spinning reads (both sides busy-poll: no wake-up). It
# sets FLOOR_BLOCK_US and FLOOR_SPIN_US (p50s, µs), FLOOR_BLOCK_P99_US and
# FLOOR_SPIN_P99_US, and FLOOR_LINE (one line saying what was measured, with
# p99s, p99/p50 and the load). A machine whose own spinning floor has a
# p99 above 3x its p50 cannot show a transfer's p99 within 3x its p50.
#
# It then runs the same exchange between two Go processes (bench/gofloor:
# the Go runtime and the engine's polling primitive, internal/spin, and
# nothing of the engine), spinning, and sets FLOOR_GO_SPIN_US and
# FLOOR_GO_SPIN_P99_US: what the runtime alone costs on this machine, its
# tail above all (its scheduler's threads, sysmon and preemption, share the
# CPUs with the pollers).
#
# floor_x US prints "N.Nx / N.Nx": US as a multiple of the spinning and of
# the blocking floor.
#
# Environment: FLOOR_ITERS (timed round trips of each mode, default 20000).
# PRIO, an array the caller may set (bench/latency.sh's RT_PRIO), prefixes
# the ping-pong's runs.

floor_measure() {
  local bin=build/bin/pingpong out_b out_s
  mkdir -p build/bin
  cc -O2 -o "$bin" bench/pingpong.c
  out_b=$("${PRIO[@]}" "$bin" -n "${FLOOR_ITERS:-20000}")
  out_s=$("${PRIO[@]}" "$bin" -s -n "${FLOOR_ITERS:-20000}")
  go build -o build/bin/gofloor ./bench/gofloor
  out_g=$("${PRIO[@]}" build/bin/gofloor -s -n "${FLOOR_ITERS:-20000}")
  read -r FLOOR_BLOCK_US FLOOR_SPIN_US FLOOR_BLOCK_P99_US FLOOR_SPIN_P99_US FLOOR_GO_SPIN_US FLOOR_GO_SPIN_P99_US FLOOR_LINE < <(python3 -c '
import json, sys
b, s, g = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
load = open("/proc/loadavg").read().split()[0]
print("%.2f %.2f %.2f %.2f %.2f %.2f round-trip floor (bench/pingpong.c: 4 KiB request, 8-byte answer, loopback TCP, two processes):"
      " spinning p50 %.1f us (p99 %.1f, p99/p50 %.1f), blocking p50 %.1f us (p99 %.1f, p99/p50 %.1f);"
      " the same in Go (bench/gofloor), spinning: p50 %.1f us (p99 %.1f, p99/p50 %.1f); load %s"
      % (b["p50_us"], s["p50_us"], b["p99_us"], s["p99_us"], g["p50_us"], g["p99_us"],
         s["p50_us"], s["p99_us"], s["p99_us"] / s["p50_us"], b["p50_us"], b["p99_us"], b["p99_us"] / b["p50_us"],
         g["p50_us"], g["p99_us"], g["p99_us"] / g["p50_us"], load))' "$out_b" "$out_s" "$out_g")
  export FLOOR_BLOCK_US FLOOR_SPIN_US FLOOR_BLOCK_P99_US FLOOR_SPIN_P99_US FLOOR_GO_SPIN_US FLOOR_GO_SPIN_P99_US FLOOR_LINE
}

floor_x() {
  python3 -c 'import sys; v = float(sys.argv[1]); print(f"{v / float(sys.argv[2]):.1f}x / {v / float(sys.argv[3]):.2f}x")' \
    "$1" "$FLOOR_SPIN_US" "$FLOOR_BLOCK_US"
}
