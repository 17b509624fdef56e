package abi

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/kvferry/kvferry/internal/hostenv"
)

var (
	setupOnce sync.Once
	setupErr  error
	logger    = slog.New(slog.DiscardHandler)
	// nixlLogger is the NIXL backend's logger (hostenv.NIXLLogger): it
	// follows NIXL_LOG_LEVEL unless kvferry's own level is set.
	nixlLogger = slog.New(slog.DiscardHandler)
	guard      net.Listener
)

// Version is the library version.
const Version = "0.1.0"

// setup runs once, at the first call that creates something: it caps
// GOMAXPROCS, claims the one-runtime-per-process guard and audits the
// host's signal handlers (specs/go-runtime.md §3).
func setup() error {
	setupOnce.Do(func() {
		logger = hostenv.Logger()
		nixlLogger = hostenv.NIXLLogger()
		if n, ok := cappedProcs(hostenv.MaxProcs(), runtime.GOMAXPROCS(0)); ok {
			runtime.GOMAXPROCS(n)
		}
		// A second copy of the library (a second Go runtime) in this
		// process would fight this one; refuse to start instead.
		name := fmt.Sprintf("@kvferry-runtime-%d", os.Getpid())
		ln, err := net.Listen("unix", name)
		if err != nil {
			setupErr = fmt.Errorf("another copy of the kvferry library already runs in process %d "+
				"(load one file; the other names must be symlinks to it): %w", os.Getpid(), err)
			logger.Error("refusing to start", "err", setupErr)
			return
		}
		guard = ln
		logger.Debug("one-runtime guard claimed", "socket", guard.Addr().String())
		if bad := auditSignals(); bad != "" {
			logger.Warn("host signal handlers lack SA_ONSTACK; the Go runtime may crash when they fire on its threads", "signals", bad)
		}
		debug.SetTraceback("all")
		startMetricsListener()
	})
	return setupErr
}

// cappedProcs is the GOMAXPROCS to set for the cap limit when the runtime
// has current, and whether to set it: a cap, never a raise, so that a host
// that set GOMAXPROCS lower (or a container's CPU limit, which the runtime
// follows) keeps it.
func cappedProcs(limit, current int) (int, bool) {
	if limit > 0 && limit < current {
		return limit, true
	}
	return current, false
}

// recovered converts a panic into errPanic; use as
// defer func() { if r := recover(); r != nil { rc = panicCode(r, code) } }().
func panicked(r any) error {
	err := fmt.Errorf("%w: %v", errPanic, r)
	logger.Error("recovered panic in C call", "err", err, "stack", string(debug.Stack()))
	return err
}

var errNULL = errors.New("NULL argument")
