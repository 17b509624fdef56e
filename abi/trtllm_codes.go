package abi

import (
	"errors"

	"github.com/kvferry/kvferry/agent/trtllm"
)

// trtCode maps an error of agent/trtllm (or of the engine under it) to the
// KVFERRY_ERR_* code of a kvferry_trtllm_* call; the one Go -> C table of
// those calls. The agent's sentinels come first; everything else is a
// resource call's code (resourceCode), -1 when unknown.
func trtCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, trtllm.ErrNotLoaded):
		return errMetadata
	case errors.Is(err, trtllm.ErrQueueFull):
		return errTooManyRequests
	case errors.Is(err, trtllm.ErrMemoryType):
		return errNotImplemented
	}
	return resourceCode(err)
}
