package client

import (
	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/internal/cmem"
)

// mapSegment maps n bytes of anonymous memory for the lent segment. With
// huge it is advised for transparent huge pages (MADV_HUGEPAGE): readers
// and writers in other processes of the host copy it with process_vm_*,
// which pins the owner's pages one page at a time, so 2 MiB pages make
// those copies markedly cheaper (README, same-host table). With populate
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
