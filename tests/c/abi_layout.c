/* Checks the struct layouts of transfer_engine_c.h against the x86-64 / arm64
 * layout Mooncake's header produces (specs/mooncake.md §1.1). */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>

#include "transfer_engine_c.h"

_Static_assert(sizeof(struct transfer_request) == 40, "transfer_request size");
_Static_assert(offsetof(struct transfer_request, opcode) == 0, "opcode");
_Static_assert(offsetof(struct transfer_request, source) == 8, "source");
_Static_assert(offsetof(struct transfer_request, target_id) == 16, "target_id");
_Static_assert(offsetof(struct transfer_request, target_offset) == 24, "target_offset");
_Static_assert(offsetof(struct transfer_request, length) == 32, "length");
_Static_assert(sizeof(struct transfer_status) == 16, "transfer_status size");
_Static_assert(offsetof(struct transfer_status, transferred_bytes) == 8, "transferred_bytes");
_Static_assert(sizeof(struct notify_msg) == 16, "notify_msg size");
_Static_assert(sizeof(struct buffer_entry) == 16, "buffer_entry size");
_Static_assert(sizeof(struct nic_load_stat) == 80, "nic_load_stat size");
_Static_assert(offsetof(struct nic_load_stat, inflight_bytes) == 64, "inflight_bytes");
_Static_assert(sizeof(segment_id_t) == 4 && sizeof(batch_id_t) == 8, "id types");
_Static_assert(LOCAL_SEGMENT == 0 && INVALID_BATCH == UINT64_MAX, "constants");
_Static_assert(OPCODE_READ == 0 && OPCODE_WRITE == 1, "opcodes");
_Static_assert(STATUS_WAITING == 0 && STATUS_PENDING == 1 && STATUS_INVALID == 2 && STATUS_CANCELED == 3 &&
                   STATUS_COMPLETED == 4 && STATUS_TIMEOUT == 5 && STATUS_FAILED == 6,
               "status codes");
_Static_assert(sizeof(struct segment_desc) == 48, "segment_desc size");

int main(void) {
    printf("abi layout ok\n");
    return 0;
}
