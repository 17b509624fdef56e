#!/usr/bin/env bash
# The CMake front end: configure, build (drives the Go build), install into a
# temporary prefix, then build a consumer with find_package(kvferry) and
# another with pkg-config, and run both.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v cmake >/dev/null || { echo "cmake missing (make test installs it: scripts/test-deps.sh)"; exit 1; }
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
cmake -S . -B "$T/b" -DCMAKE_INSTALL_PREFIX="$T/inst" >/dev/null
cmake --build "$T/b" >/dev/null
cmake --install "$T/b" >/dev/null
for f in lib/libkvferry.so.1 lib/libkvferry.so lib/libtransfer_engine.so lib/nixl/libplugin_KVFERRY.so \
         lib/trtllm/libtensorrt_llm_mooncake_wrapper.so include/kvferry/transfer_engine_c.h \
         include/kvferry/kvferry.h lib/pkgconfig/kvferry.pc lib/cmake/kvferry/kvferryConfig.cmake; do
  [ -e "$T/inst/$f" ] || { echo "missing $f"; exit 1; }
done
[ "$(readlink "$T/inst/lib/libtransfer_engine.so")" = "libkvferry.so.1" ] || { echo "libtransfer_engine.so must be a symlink"; exit 1; }
mkdir -p "$T/consumer"
cat > "$T/consumer/main.c" <<'C'
#include <stdio.h>
#include <transfer_engine_c.h>
#include <kvferry.h>
int main(void) {
    transfer_engine_t e = createTransferEngine("P2PHANDSHAKE", "127.0.0.1", NULL, 0, 1);
    char buf[64];
    if (!e || getLocalIpAndPort(e, buf, sizeof buf) != 0) return 1;
    printf("consumer: api %d, segment %s\n", kvferry_api_version(), buf);
    destroyTransferEngine(e);
    return 0;
}
C
cat > "$T/consumer/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(kvferry 0.1 REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer kvferry::kvferry)
C
cmake -S "$T/consumer" -B "$T/cb" -DCMAKE_PREFIX_PATH="$T/inst" >/dev/null
cmake --build "$T/cb" >/dev/null
LD_LIBRARY_PATH="$T/inst/lib" "$T/cb/consumer"
gcc -o "$T/pc" "$T/consumer/main.c" $(PKG_CONFIG_PATH="$T/inst/lib/pkgconfig" pkg-config --cflags --libs kvferry)
LD_LIBRARY_PATH="$T/inst/lib" "$T/pc"
echo "cmake install and consumers ok"
