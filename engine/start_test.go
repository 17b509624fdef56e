package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
)

// TestStartFailsPromptly: an engine whose transport cannot be installed
// (an RDMA transport without NICs, say) fails to start with the reason,
// promptly, rather than hanging in its own cleanup.
func TestStartFailsPromptly(t *testing.T) {
	boom := errors.New("no such hardware")
	done := make(chan error, 1)
	go func() {
		_, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{
			LocalServerName: "127.0.0.1", Transports: []string{"broken"},
			NewTransport: func(string, *engine.Engine) (engine.Transport, error) { return nil, boom },
		}})
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, boom)
	case <-time.After(20 * time.Second):
		t.Fatal("engine start hung after a failed transport install")
	}
}
