# Sourced by bench/te_mooncake.sh and bench/store_mooncake.sh: what both
# side-by-side scripts set up the same way. MC_ENV is the Mooncake
# processes' environment (MOONCAKE_ENV; default its connection pool on),
# PRIO the chrt prefix for RT_PRIO, T a scratch directory, and pids the
# background processes, killed with T removed on exit.
read -r -a MC_ENV <<< "${MOONCAKE_ENV-MC_TCP_ENABLE_CONNECTION_POOL=1}"
PRIO=()
[ -z "${RT_PRIO:-}" ] || PRIO=(chrt -r "$RT_PRIO")
T="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
