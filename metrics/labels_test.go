package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gotest.tools/v3/assert"
)

// TestInvalidUTF8Label is tests/cfuzz's finding: an engine named with bytes
// that are not UTF-8 (createTransferEngine's local_server_name, a peer's
// segment name) made the collector panic, and since a retired engine's
// counters are kept, every scrape of the process failed from then on.
func TestInvalidUTF8Label(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	e := NewEngine(nil)
	l := e.Link("tcp", "\xff\xfe:15321")
	l.Submitted(1)
	l.Completed(1, 4096, time.Microsecond)
	e.Close()
	_, err := reg.Gather()
	assert.NilError(t, err)
	got := value(t, reg, "kvferry_engine_tasks_total", map[string]string{"peer": "\uFFFD:15321", "op": "write", "state": "completed"})
	assert.Equal(t, got, 1.0)
}
