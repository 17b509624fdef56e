package client

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/wire"
)

// Buffer is Size bytes of C memory at Addr: one piece of an object of a
// multi-buffer put or get (Mooncake's batch_put_from_multi_buffers and
// batch_get_into_multi_buffers).
type Buffer struct {
	Addr uintptr
	Size uint64
}

// partsSpan returns the span of an object made of bufs, in order. Empty
// buffers are skipped and adjacent ones merged; one left is a plain C span.
// A buffer with a NULL address and a size, or a total that overflows, is
// false. The span may share bufs' array (it never writes to it).
func partsSpan(bufs []Buffer) (span, bool) {
	var size uint64
	tidy := true // no empty buffer, none adjacent to the one before
	for k, b := range bufs {
		if b.Size == 0 {
			tidy = false
			continue
		}
		if b.Addr == 0 || size+b.Size < size {
			return span{}, false
		}
		size += b.Size
		if k > 0 && bufs[k-1].Addr+uintptr(bufs[k-1].Size) == b.Addr {
			tidy = false
		}
	}
	parts := bufs
	if !tidy {
		parts = make([]Buffer, 0, len(bufs))
		for _, b := range bufs {
			if b.Size == 0 {
				continue
			}
			if n := len(parts); n > 0 && parts[n-1].Addr+uintptr(parts[n-1].Size) == b.Addr {
				parts[n-1].Size += b.Size
				continue
			}
			parts = append(parts, b)
		}
	}
	switch len(parts) {
	case 0:
		return span{}, true
	case 1:
		return cSpan(parts[0].Addr, size), true
	}
	return span{parts: parts, size: size}, true
}

// capacity returns the total size of bufs, and false for a NULL address
// with a size or an overflow.
func capacity(bufs []Buffer) (uint64, bool) {
	var n uint64
	for _, b := range bufs {
		if (b.Addr == 0 && b.Size > 0) || n+b.Size < n {
			return 0, false
		}
		n += b.Size
	}
	return n, true
}

// prefixSpan returns the span of the first size bytes of bufs, whose total
// is at least size: an object read scattered over them in order. When
// whole buffers hold it (the buffers of a key are mostly sized to its
// object) the span shares bufs' array; only a buffer that holds the end of
// the object and more is cut, in a copy.
func prefixSpan(bufs []Buffer, size uint64) span {
	k, left := 0, size // bufs[:k] are whole parts; left bytes remain after them
	for k < len(bufs) && left >= bufs[k].Size && left > 0 {
		left -= bufs[k].Size
		k++
	}
	if left == 0 || k == len(bufs) { // (the caller checked that bufs hold size)
		s, _ := partsSpan(bufs[:k:k])
		return s
	}
	parts := make([]Buffer, k+1)
	copy(parts, bufs[:k])
	parts[k] = Buffer{Addr: bufs[k].Addr, Size: left}
	s, _ := partsSpan(parts)
	return s
}

// requests returns how many engine requests the span takes per replica
// (appendRequests).
func (s span) requests() int {
	if s.gpu == nil {
		return 1
	}
	return max(len(s.parts), 1)
}

// Buffer and engine.Piece have one layout (pieces converts between them).
var _ = [1]struct{}{}[unsafe.Offsetof(Buffer{}.Size)-unsafe.Offsetof(engine.Piece{}.Length)]

// pieces returns the parts as the engine's pieces (the same layout, the
// same array: the engine reads them until the request completes, and
// nothing changes them meanwhile).
func (s span) pieces() []engine.Piece {
	return unsafe.Slice((*engine.Piece)(unsafe.Pointer(unsafe.SliceData(s.parts))), len(s.parts))
}

// inRegion reports whether b lies inside region r (false for nil).
func inRegion(r *engine.Region, b Buffer) bool {
	return r != nil && uint64(b.Addr) >= uint64(r.Addr) && uint64(b.Addr)+b.Size <= uint64(r.Addr)+r.Length &&
		uint64(b.Addr)+b.Size >= uint64(b.Addr)
}

// partsRegistered reports whether every part is in registered memory,
// looking up a region only for a part outside the last one found (the
// parts of an object mostly lie in one registration).
func (s span) partsRegistered(e *engine.Engine) bool {
	var r *engine.Region
	for _, p := range s.parts {
		if inRegion(r, p) {
			continue
		}
		if r = e.RegionOf(uint64(p.Addr), p.Size); r == nil {
			return false
		}
	}
	return true
}

// copyParts copies n bytes at offset off of a span in parts to the C
// address mem (out) or from it (!out), through the CUDA driver when the
// span holds GPU memory.
func (s span) copyParts(mem uintptr, off, n uint64, out bool) error {
	for _, p := range s.parts {
		if n == 0 {
			return nil
		}
		if off >= p.Size {
			off -= p.Size
			continue
		}
		k := min(p.Size-off, n)
		dst, src := mem, p.Addr+uintptr(off)
		if !out {
			dst, src = src, dst
		}
		if s.gpu != nil {
			if err := s.gpuCopy(dst, src, k); err != nil {
				return err
			}
		} else {
			cmem.Copy(dst, src, k)
		}
		mem += uintptr(k)
		n -= k
		off = 0
	}
	return nil
}

// BatchPutFromMulti puts, for each key, the concatenation of its buffers
// (bufs[i], in order) as one object, with the master calls and the single
// engine batch of BatchPutFrom: registered buffers are gathered by the
// transfer engine straight into the holders' memory (one request per
// buffer and replica), with no copy; a key with an unregistered buffer is
// staged. errs[i] is the result of keys[i].
func (c *Client) BatchPutFromMulti(ctx context.Context, keys []string, bufs [][]Buffer, cfg ReplicateConfig) []error {
	return c.batchPutMulti(ctx, keys, bufs, cfg, false)
}

// BatchUpsertFromMulti is BatchPutFromMulti that replaces existing objects.
func (c *Client) BatchUpsertFromMulti(ctx context.Context, keys []string, bufs [][]Buffer, cfg ReplicateConfig) []error {
	return c.batchPutMulti(ctx, keys, bufs, cfg, true)
}

func (c *Client) batchPutMulti(ctx context.Context, keys []string, bufs [][]Buffer, cfg ReplicateConfig, upsert bool) []error {
	if len(bufs) != len(keys) {
		errs := make([]error, len(keys))
		for i := range errs {
			errs[i] = fmt.Errorf("batch put: %d keys, %d buffer lists: %w", len(keys), len(bufs), wire.ErrInvalidParams)
		}
		return errs
	}
	data := make([]span, len(keys))
	for i, b := range bufs {
		data[i], _ = partsSpan(b) // a bad list stays invalid (size 0)
	}
	return c.batchPut(ctx, keys, data, cfg, upsert)
}

// BatchGetIntoMulti reads each key and scatters its bytes over its
// buffers (bufs[i], in order), with one master call and one engine batch
// (one request per buffer) for registered buffers. n[i] is the object size
// read; a key whose buffers hold less than its object is INVALID_PARAMS
// and nothing of it is read.
func (c *Client) BatchGetIntoMulti(ctx context.Context, keys []string, bufs [][]Buffer) (n []uint64, errs []error) {
	return c.batchGet(ctx, keys, bufs)
}
