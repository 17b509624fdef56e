package abi

/*
int kvf_gs_install(void);
void kvf_gs_reraise(int sig);
*/
import "C"

import (
	"os"
	"sync"

	"github.com/kvferry/kvferry/engine"
)

var graceful struct {
	sync.Mutex
	started bool
	targets map[uintptr]*engine.Engine
}

// enableGracefulShutdown makes SIGTERM/SIGINT destroy e (and every other
// engine enabled so) before the process's previous disposition applies.
func enableGracefulShutdown(h uintptr, e *engine.Engine) {
	graceful.Lock()
	defer graceful.Unlock()
	if graceful.targets == nil {
		graceful.targets = map[uintptr]*engine.Engine{}
	}
	graceful.targets[h] = e
	if graceful.started {
		return
	}
	fd := C.kvf_gs_install()
	if fd < 0 {
		logger.Warn("graceful shutdown: cannot create signal pipe")
		return
	}
	graceful.started = true
	f := os.NewFile(uintptr(fd), "kvferry-signal-pipe")
	go func() { // lives as long as the process
		var b [1]byte
		if _, err := f.Read(b[:]); err != nil {
			return
		}
		graceful.Lock()
		ts := graceful.targets
		graceful.targets = nil
		graceful.Unlock()
		for h, e := range ts {
			engines.remove(h)
			_ = e.Close()
		}
		C.kvf_gs_reraise(C.int(b[0]))
	}()
}
