/* footprint.c: an idle transfer engine of the shared library in a C host,
 * for bench/footprint.sh. Creates a P2P engine with the TCP transport,
 * registers a buffer of BYTES (default 1 GiB) with every page touched,
 * prints "ready <pid>" and then sleeps for SECONDS (default 30) without
 * transferring anything, so that the script can read /proc/<pid> at idle.
 *
 *   cc -O2 -Iinclude bench/footprint.c -Lbuild/lib -lkvferry -o footprint
 *   ./footprint [BYTES [SECONDS]]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transfer_engine_c.h"

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 30;
  int seconds = argc > 2 ? atoi(argv[2]) : 30;
  if (bytes == 0 || seconds <= 0) {
    fprintf(stderr, "usage: %s [BYTES [SECONDS]]\n", argv[0]);
    return 2;
  }
  transfer_engine_t e =
      createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "127.0.0.1", 0, 0);
  if (e == NULL) {
    fprintf(stderr, "createTransferEngine failed\n");
    return 1;
  }
  if (installTransport(e, "tcp", NULL) == NULL) {
    fprintf(stderr, "installTransport(tcp) failed\n");
    return 1;
  }
  char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  for (size_t i = 0; i < bytes; i += 4096) buf[i] = (char)(i >> 12);
  if (registerLocalMemory(e, buf, bytes, "cpu:0", 1) != 0) {
    fprintf(stderr, "registerLocalMemory failed\n");
    return 1;
  }
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  sleep((unsigned)seconds);
  unregisterLocalMemory(e, buf);
  destroyTransferEngine(e);
  munmap(buf, bytes);
  return 0;
}
