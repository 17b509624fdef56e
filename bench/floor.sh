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
  read -r FLOOR_BLOCK_US FLOOR_SPIN_US FLOOR_BLOCK_P99_US FLOOR_SPIN_P99_US FLOOR_LINE < <(python3 -c '
import json, sys
b, s = json.loads(sys.argv[1]), json.loads(sys.argv[2])
load = open("/proc/loadavg").read().split()[0]
print("%.2f %.2f %.2f %.2f round-trip floor (bench/pingpong.c: 4 KiB request, 8-byte answer, loopback TCP, two processes):"
      " spinning p50 %.1f us (p99 %.1f, p99/p50 %.1f), blocking p50 %.1f us (p99 %.1f, p99/p50 %.1f), load %s"
      % (b["p50_us"], s["p50_us"], b["p99_us"], s["p99_us"], s["p50_us"], s["p99_us"], s["p99_us"] / s["p50_us"],
         b["p50_us"], b["p99_us"], b["p99_us"] / b["p50_us"], load))' "$out_b" "$out_s")
  export FLOOR_BLOCK_US FLOOR_SPIN_US FLOOR_BLOCK_P99_US FLOOR_SPIN_P99_US FLOOR_LINE
}

floor_x() {
  python3 -c 'import sys; v = float(sys.argv[1]); print(f"{v / float(sys.argv[2]):.1f}x / {v / float(sys.argv[3]):.2f}x")' \
    "$1" "$FLOOR_SPIN_US" "$FLOOR_BLOCK_US"
}
