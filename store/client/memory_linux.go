package client

import (
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/memfd"
)

// mapGlobal maps the lent segment. With shared it is memfd-backed
// (internal/memfd): a same-host client that the kernel lets access this
// process receives the memfd over its cma session, maps it once and copies
// with memcpy, where it would otherwise make a process_vm_* call per
// transfer that pins the pages it touches. Without shared, or where no
// memfd can be made, it is anonymous memory (mapSegment).
//
// A populated segment is shared only where populating pays: on hosts whose
// page tables a mapper can set up ahead (MADV_POPULATE_WRITE), a peer's
// memcpy into the mapping takes no fault. Some virtual machines (shadow
// paging) fault on every page's first access from user space however it
// was populated, about 14 us a 4 KiB page (3.5 ms a MiB) here, paid anew by
// every peer mapping: a same-host 1 MiB put into fresh pages of the mapping
// took 2-3 ms, against about 0.2 ms by process_vm_writev, which copies
// through the kernel's own mapping of the pages. There the segment is
// anonymous memory (huge pages where THP allows, which the owner's own
// writes fault in 2 MiB at a time), as with KVFERRY_CMA_MAP=0.
func mapGlobal(n uint64, populate, huge, shared bool) (segmentMemory, error) {
	if shared && !(populate && firstTouchCostly()) {
		if m, err := memfd.New("kvferry-segment", n, populate); err == nil {
			return m, nil
		}
	}
	return mapSegment(n, populate, huge)
}

// mapSegment maps n bytes of anonymous memory for the lent segment. With
// huge it is advised for transparent huge pages (MADV_HUGEPAGE): readers
// and writers in other processes of the host copy it with process_vm_*,
// which pins the owner's pages one page at a time, so 2 MiB pages make
// those copies markedly cheaper (docs/reports/benchmarks.md, "Same host,
// two processes"). With populate
// every page is faulted in now. A kernel without THP keeps 4 KiB pages.
func mapSegment(n uint64, populate, huge bool) (*cmem.Map, error) {
	if !huge {
		if populate {
			return cmem.MapAnonPopulate(n)
		}
		return cmem.MapAnon(n)
	}
	m, err := cmem.MapAnon(n)
	if err != nil {
		return nil, err
	}
	_ = unix.Madvise(m.Bytes(), unix.MADV_HUGEPAGE) // EINVAL without THP: plain pages
	if populate {
		prefault(m.Bytes())
	}
	return m, nil
}

// prefault faults every page of b in for writing.
func prefault(b []byte) {
	if unix.Madvise(b, unix.MADV_POPULATE_WRITE) == nil {
		return
	}
	// Before Linux 5.14: touch every page (the memory is zero already).
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
}

// firstTouchCostly says whether this host faults on the first user-space
// access of a page that was populated beforehand (probeFirstTouch, run
// once); tests replace it.
var firstTouchCostly = sync.OnceValue(probeFirstTouch)

// Probe sizes: probeGroups groups of probePages pages, each group read once
// for the first time; a group's time is the pages' cost plus whatever
// preempted the reader, so the cheapest group is the host's cost.
const (
	probeGroups = 8
	probePages  = 8
	// costlyTouchPerPage: a populated page whose first read takes longer
	// faults. A page-table walk and a cache miss take well under 1 us; a
	// fault taken by a hypervisor takes several.
	costlyTouchPerPage = 2 * time.Microsecond
)

// probeFirstTouch maps populated anonymous memory (4 KiB pages) and times
// the first read of each page, in groups; it reports whether the cheapest
// group cost more than costlyTouchPerPage a page. No memory: not costly.
func probeFirstTouch() bool {
	const page = 4096
	m, err := cmem.MapAnonPopulate(probeGroups * probePages * page)
	if err != nil {
		return false
	}
	defer m.Close()
	base := unsafe.Pointer(unsafe.SliceData(m.Bytes()))
	best := time.Duration(1<<63 - 1)
	var sum byte
	for g := 0; g < probeGroups; g++ {
		t0 := time.Now()
		for i := 0; i < probePages; i++ {
			sum += *(*byte)(unsafe.Add(base, (g*probePages+i)*page))
		}
		best = min(best, time.Since(t0))
	}
	runtime.KeepAlive(sum) // the reads are the probe
	return best > probePages*costlyTouchPerPage
}
