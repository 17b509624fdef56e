package client

import (
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
func mapGlobal(n uint64, populate, huge, shared bool) (segmentMemory, error) {
	if shared {
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
