// The public C functions of the "Store segments" section of kvferry.h.
// Each checks the fork guard and its pointer arguments, then calls one
// hidden Go export (store_segment_exports.go). The huge-page allocator is
// plain C: it runs in any thread, Go's or not, with no Go call.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store_c.h"
#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))
#define U(p) ((uintptr_t)(p))

int kvf_forked(void);

KVF_API int kvferry_store_mount_segment(mooncake_store_t store, const char *path, uint64_t offset,
                                        uint64_t size, const char *protocol,
                                        const char *location, char *segment_ids,
                                        size_t segment_ids_len) {
    if (kvf_forked() || !store || !path || !segment_ids) return -1;
    return kvf_store_mount_segment(U(store), (char *)path, offset, size, (char *)protocol,
                                   (char *)location, segment_ids, segment_ids_len);
}

KVF_API int kvferry_store_allocate_and_mount_segment(mooncake_store_t store, uint64_t size,
                                                     const char *protocol,
                                                     const char *location,
                                                     uint64_t *allocated_size,
                                                     char *segment_ids,
                                                     size_t segment_ids_len) {
    if (kvf_forked() || !store || !segment_ids) return -1;
    return kvf_store_allocate_and_mount_segment(U(store), size, (char *)protocol,
                                                (char *)location, allocated_size, segment_ids,
                                                segment_ids_len);
}

KVF_API int kvferry_store_unmount_segment(mooncake_store_t store, const char **segment_ids,
                                          size_t count, uint64_t grace_period_seconds,
                                          int free_memory) {
    if (kvf_forked() || !store || (!segment_ids && count > 0)) return -1;
    for (size_t i = 0; i < count; i++)
        if (!segment_ids[i]) return -1;
    return kvf_store_unmount_segment(U(store), (char **)segment_ids, count, grace_period_seconds,
                                     free_memory);
}

KVF_API int kvferry_store_unmount_local_disk_segment(mooncake_store_t store,
                                                     uint64_t grace_period_seconds) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_unmount_local_disk_segment(U(store), grace_period_seconds);
}

KVF_API int64_t kvferry_store_offload_read_count(mooncake_store_t store) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_offload_read_count(U(store));
}

/* Huge-page host memory. Each block starts with one page that records
 * the mapping's length; the caller gets the address after it (aligned to
 * the page size, 4 KiB or more). 2 MiB pages are asked first (MAP_HUGETLB),
 * then transparent huge pages are advised on ordinary ones. */
#define KVF_HP_MAGIC 0x6b76666870616765ULL /* "kvfhpage" */

KVF_API void *kvferry_hugepage_alloc(size_t size) {
    if (size == 0 || size > ((size_t)1 << 62)) return NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t huge = (size_t)2 << 20;
    size_t len = (size + page + huge - 1) & ~(huge - 1);
    void *p = MAP_FAILED;
#ifdef MAP_HUGETLB
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
#endif
    if (p == MAP_FAILED) {
        len = (size + page + page - 1) & ~(page - 1);
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
        (void)madvise(p, len, MADV_HUGEPAGE);
#endif
    }
    uint64_t *head = (uint64_t *)p;
    head[0] = KVF_HP_MAGIC;
    head[1] = (uint64_t)len;
    return (char *)p + page;
}

KVF_API void kvferry_hugepage_free(void *ptr) {
    if (!ptr) return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (((uintptr_t)ptr & (page - 1)) != 0) return;
    uint64_t *head = (uint64_t *)((char *)ptr - page);
    if (head[0] != KVF_HP_MAGIC) return;
    size_t len = (size_t)head[1];
    head[0] = 0;
    munmap(head, len);
}
