// Package cmem is the one audited place where kvferry turns C addresses into
// Go slices and copies bulk data with C memcpy (glibc's copy is 1.6-1.9x
// faster than Go's copy for large blocks here; see specs/go-runtime.md §4).
// It also allocates off-heap memory for staging buffers and tests.
//
// Nothing here checks that an address is valid: callers check addresses
// against the memory registry before they call in.
package cmem

/*
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

typedef struct { uintptr_t dst, src; size_t n; } kvf_copy;


// kvf_copy_one copies n bytes (memmove: a local request may name
// overlapping ranges). Where source and destination are not aligned alike
// to 64 bytes and do not overlap, glibc's memcpy is slow on the AMD EPYC of
// our machines: above 2 KiB it uses rep movsb, which runs at 3-24 GB/s for
// such pairs (a block 8 or 16 bytes off its peer: numpy's placement against
// a 64-byte aligned store object), and its vector loop below that keeps
// 15-20 GB/s. Such pairs of 128 bytes and more go through kvf_copy_vec
// (unaligned loads, stores aligned on the destination: 37-40 GB/s for
// cache-resident 4 KiB blocks where memcpy gave 2.7-24, and at least
// memcpy's speed for blocks that stream from memory); without AVX2, copies
// of more than 8 KiB go in 2 KiB steps, under the rep movsb threshold. In a
// batch that streams its stores (nt, KVF_NT_BYTES) every pair of 128 bytes
// and more that does not overlap goes through kvf_copy_stream; next is the
// batch's next copy, whose source it reads ahead.
#define KVF_STEP 2048
static int kvf_have_avx2;

#if defined(__x86_64__)
#include <immintrin.h>
// kvf_copy_vec copies n >= 64 bytes between ranges that do not overlap:
// the first and last 32 bytes with unaligned moves, the rest as aligned
// 32-byte stores on the destination, four at a time.
__attribute__((target("avx2"))) static void kvf_copy_vec(char *d, const char *s, size_t n) {
	__m256i head = _mm256_loadu_si256((const __m256i *)s);
	__m256i tail = _mm256_loadu_si256((const __m256i *)(s + n - 32));
	size_t a = (32 - ((uintptr_t)d & 31)) & 31;
	char *dd = d + a;
	const char *ss = s + a;
	size_t m = n - a;
	for (; m >= 128; dd += 128, ss += 128, m -= 128) {
		__m256i x0 = _mm256_loadu_si256((const __m256i *)ss);
		__m256i x1 = _mm256_loadu_si256((const __m256i *)(ss + 32));
		__m256i x2 = _mm256_loadu_si256((const __m256i *)(ss + 64));
		__m256i x3 = _mm256_loadu_si256((const __m256i *)(ss + 96));
		_mm256_store_si256((__m256i *)dd, x0);
		_mm256_store_si256((__m256i *)(dd + 32), x1);
		_mm256_store_si256((__m256i *)(dd + 64), x2);
		_mm256_store_si256((__m256i *)(dd + 96), x3);
	}
	for (; m >= 32; dd += 32, ss += 32, m -= 32)
		_mm256_store_si256((__m256i *)dd, _mm256_loadu_si256((const __m256i *)ss));
	_mm256_storeu_si256((__m256i *)d, head);
	_mm256_storeu_si256((__m256i *)(d + n - 32), tail);
}

// kvf_copy_edge copies n < 64 bytes (the part of a destination cache line
// that a streaming copy leaves to cached stores).
__attribute__((target("avx2"))) static void kvf_copy_edge(char *d, const char *s, size_t n) {
	if (n >= 32) {
		__m256i x = _mm256_loadu_si256((const __m256i *)s);
		__m256i y = _mm256_loadu_si256((const __m256i *)(s + n - 32));
		_mm256_storeu_si256((__m256i *)d, x);
		_mm256_storeu_si256((__m256i *)(d + n - 32), y);
	} else if (n > 0) {
		memcpy(d, s, n);
	}
}

// KVF_AHEAD: while a streaming copy moves its last KVF_AHEAD bytes, it
// prefetches as many of the next copy's source, one line for each line it
// copies. A batch that gathers many blocks from memory (the per-layer KV
// blocks of a key, 512 KiB apart) otherwise restarts the hardware
// prefetcher's stream at each block: 1,024 blocks of 32 KiB read 0.84-0.89x
// as fast as the same bytes contiguous, and 1.03-1.14x faster with this.
#define KVF_AHEAD 4096

// kvf_copy_stream copies n >= 128 bytes between ranges that do not
// overlap, with non-temporal (streaming) stores for every whole 64-byte
// line of the destination and cached stores for the partial lines at
// either end; the caller ends the batch with a store fence. No line sees
// both kinds of store: a cached store into a line whose streaming stores
// are still in a write-combining buffer flushes the buffer and reads the
// line back from memory, a stall per copy that cost a batch of 1,024
// 32 KiB blocks 10-20 % of its speed against 16 blocks of 2 MiB. next and
// nn are the next copy's source and size (NULL and 0 for none), read ahead
// (KVF_AHEAD); a prefetch never faults.
__attribute__((target("avx2"))) static void kvf_copy_stream(char *d, const char *s, size_t n, const char *next, size_t nn) {
	size_t a = (64 - ((uintptr_t)d & 63)) & 63;
	kvf_copy_edge(d, s, a);
	char *dd = d + a;
	const char *ss = s + a;
	size_t m = n - a;
	for (; m >= 128; dd += 128, ss += 128, m -= 128) {
		if (m <= KVF_AHEAD && KVF_AHEAD - m < nn) {
			_mm_prefetch(next + (KVF_AHEAD - m), _MM_HINT_T0);
			_mm_prefetch(next + (KVF_AHEAD - m) + 64, _MM_HINT_T0);
		}
		__m256i x0 = _mm256_loadu_si256((const __m256i *)ss);
		__m256i x1 = _mm256_loadu_si256((const __m256i *)(ss + 32));
		__m256i x2 = _mm256_loadu_si256((const __m256i *)(ss + 64));
		__m256i x3 = _mm256_loadu_si256((const __m256i *)(ss + 96));
		_mm256_stream_si256((__m256i *)dd, x0);
		_mm256_stream_si256((__m256i *)(dd + 32), x1);
		_mm256_stream_si256((__m256i *)(dd + 64), x2);
		_mm256_stream_si256((__m256i *)(dd + 96), x3);
	}
	if (m >= 64) {
		__m256i x0 = _mm256_loadu_si256((const __m256i *)ss);
		__m256i x1 = _mm256_loadu_si256((const __m256i *)(ss + 32));
		_mm256_stream_si256((__m256i *)dd, x0);
		_mm256_stream_si256((__m256i *)(dd + 32), x1);
		dd += 64, ss += 64, m -= 64;
	}
	kvf_copy_edge(dd, ss, m);
}
#endif

// KVF_NT_BYTES: a batch moving this much or more streams its stores past
// the caches (the destination would not stay in them anyway), aligned
// pairs too: glibc's memcpy streams only above about three quarters of the
// last-level cache per copy, and a same-host store get of 16 objects of
// 64 x 32 KiB page-aligned blocks ran at 6.5-7.6 GB/s through it against
// 12-13 with misaligned ones here. Misaligned pairs: 16-19 GB/s where
// cached stores gave 12-15 for 32 KiB-2 MiB blocks on our EPYC. Below it
// the destination is better left cached, unless the caller knows it will
// not be read here soon (stream: CopyBatchStreaming).
#define KVF_NT_BYTES (8u << 20)

static void kvf_copy_one(uintptr_t dst, uintptr_t src, size_t n, int nt, const kvf_copy *next) {
	int apart = dst + n <= src || src + n <= dst;
#if defined(__x86_64__)
	if (nt && apart && n >= 128) { // (nt implies AVX2)
		kvf_copy_stream((char *)dst, (const char *)src, n, next ? (const char *)next->src : NULL, next ? next->n : 0);
		return;
	}
#endif
	if (((dst - src) & 63) != 0 && apart) {
#if defined(__x86_64__)
		if (kvf_have_avx2 && n >= 128) {
			kvf_copy_vec((char *)dst, (const char *)src, n);
			return;
		}
#endif
		if (n > 4 * KVF_STEP) {
			while (n > KVF_STEP) {
				memcpy((void *)dst, (const void *)src, KVF_STEP);
				dst += KVF_STEP; src += KVF_STEP; n -= KVF_STEP;
			}
			memcpy((void *)dst, (const void *)src, n);
			return;
		}
	}
	memmove((void *)dst, (const void *)src, n);
}

static void kvf_set_avx2(int on) { kvf_have_avx2 = on; }

static void kvf_fence(int nt) {
#if defined(__x86_64__)
	if (nt) _mm_sfence();
#endif
}

// kvf_memcpy_batch folds many copies into one cgo crossing.
static void kvf_memcpy_batch(const kvf_copy *c, size_t n, int stream) {
	size_t total = 0;
	for (size_t i = 0; i < n; i++) total += c[i].n;
	int nt = kvf_have_avx2 && (stream || total >= KVF_NT_BYTES);
	for (size_t i = 0; i < n; i++) kvf_copy_one(c[i].dst, c[i].src, c[i].n, nt, i + 1 < n ? &c[i + 1] : NULL);
	kvf_fence(nt);
}

static void kvf_memcpy(uintptr_t dst, uintptr_t src, size_t n) {
	int nt = kvf_have_avx2 && n >= KVF_NT_BYTES;
	kvf_copy_one(dst, src, n, nt, NULL);
	kvf_fence(nt);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

func init() { setVectorCopy(cpu.X86.HasAVX2) }

// setVectorCopy turns the AVX2 copy of misaligned pairs on or off (off:
// the stepped memcpy). The CPU check decides at start-up; tests switch it
// to cover both paths.
func setVectorCopy(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.kvf_set_avx2(v)
}

// Bytes returns a slice over n bytes of C memory at addr, without copying.
// The memory must stay valid and registered while the slice is used.
func Bytes(addr uintptr, n uint64) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(Pointer(addr)), int(n))
}

// Pointer converts a C address held as an integer into an unsafe.Pointer.
// The address is C memory (never Go heap), so the garbage collector does not
// care about it; the indirection keeps vet's uintptr check quiet for this one
// audited conversion.
func Pointer(addr uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}

// Copy copies n bytes from src to dst with C memcpy. The ranges must not overlap.
func Copy(dst, src uintptr, n uint64) {
	if n == 0 {
		return
	}
	C.kvf_memcpy(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n))
}

// Op is one copy of a batch.
type Op struct {
	Dst, Src uintptr
	N        uint64
}

// CopyBatch performs every copy of ops in one cgo crossing.
func CopyBatch(ops []Op) { copyBatch(ops, 0) }

// CopyBatchStreaming is CopyBatch with streaming stores whatever the
// batch's size (where the CPU has AVX2): for destinations this process will
// not read again soon.
func CopyBatchStreaming(ops []Op) { copyBatch(ops, 1) }

func copyBatch(ops []Op, stream C.int) {
	if len(ops) == 0 {
		return
	}
	// Op has the layout of kvf_copy: three 8-byte fields.
	C.kvf_memcpy_batch((*C.kvf_copy)(unsafe.Pointer(&ops[0])), C.size_t(len(ops)), stream)
}

// Malloc allocates n bytes with C malloc; the memory is not zeroed.
func Malloc(n uint64) (uintptr, error) {
	p := C.malloc(C.size_t(n))
	if p == nil {
		return 0, fmt.Errorf("malloc %d bytes: out of memory", n)
	}
	return uintptr(p), nil
}

// Free releases memory from Malloc.
func Free(addr uintptr) {
	C.free(Pointer(addr))
}

// Map is a memory mapping: anonymous and private (MapAnon), or shared (MapShared, MapFile).
type Map struct {
	b []byte
}

// MapAnon maps n bytes of zeroed anonymous memory.
func MapAnon(n uint64) (*Map, error) {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	return &Map{b: b}, nil
}

// MapAnonPopulate maps n bytes like MapAnon and faults every page in at
// once (MAP_POPULATE), so later first writes pay no page faults.
func MapAnonPopulate(n uint64) (*Map, error) {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes (populated): %w", n, err)
	}
	return &Map{b: b}, nil
}

// MapShared maps n bytes of the file fd from offset 0, shared with every
// other mapping of it (memory a memfd shares between processes).
func MapShared(fd int, n uint64) (*Map, error) {
	b, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d shared bytes of fd %d: %w", n, fd, err)
	}
	return &Map{b: b}, nil
}

// MapFile maps n bytes of the file fd from offset (a multiple of the page
// size), read-write and shared: writes reach the file, and every other
// process mapping it sees them.
func MapFile(fd int, offset, n uint64) (*Map, error) {
	if n == 0 || n > uint64(^uint(0)>>1) || offset > 1<<62 {
		return nil, fmt.Errorf("mmap %d bytes at offset %d of fd %d: %w", n, offset, fd, unix.EINVAL)
	}
	b, err := unix.Mmap(fd, int64(offset), int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes at offset %d of fd %d: %w", n, offset, fd, err)
	}
	return &Map{b: b}, nil
}

// Addr returns the mapping's start address.
func (m *Map) Addr() uintptr { return uintptr(unsafe.Pointer(&m.b[0])) }

// Bytes returns the mapping as a slice.
func (m *Map) Bytes() []byte { return m.b }

// Len returns the mapping's size in bytes.
func (m *Map) Len() uint64 { return uint64(len(m.b)) }

// Close unmaps the memory; a second Close is harmless.
func (m *Map) Close() error {
	if m.b == nil {
		return nil
	}
	err := unix.Munmap(m.b)
	m.b = nil
	return err
}
