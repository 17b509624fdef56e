package master

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// httpDo sends a request with an optional JSON body and decodes the JSON
// answer.
func httpDo(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	assert.NilError(t, err)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	var out map[string]any
	assert.NilError(t, json.Unmarshal(b, &out), string(b))
	return resp.StatusCode, out
}

// TestAdminDrainJobs: Mooncake's drain job endpoints, their answers and
// their error codes and HTTP statuses.
func TestAdminDrainJobs(t *testing.T) {
	srv, err := NewServer(Config{RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", MaintenanceInterval: time.Hour})
	assert.NilError(t, err)
	defer srv.Close()
	svc := srv.Service()
	assert.NilError(t, svc.MountSegment("c1", SegmentInfo{ID: "s1", Name: "host:1", Base: 1 << 20, Size: 1 << 20}))
	assert.NilError(t, svc.MountSegment("c2", SegmentInfo{ID: "s2", Name: "host:2", Base: 1 << 20, Size: 1 << 20}))
	_, err = svc.PutStart("c1", "", "k", 1000, ReplicateConfig{PreferredSegments: []string{"host:1"}}, false)
	assert.NilError(t, err)
	assert.NilError(t, svc.PutEnd("c1", "", "k"))
	base := "http://" + srv.MetricsAddr()

	for _, tc := range []struct {
		name, body string
		status     int
		code       float64
	}{
		{"not json", "{", 400, -600},
		{"no segments", `{"segments": []}`, 400, -600},
		{"zero concurrency", `{"segments": ["host:1"], "max_concurrency": 0}`, 400, -600},
		{"repeated", `{"segments": ["host:1", "host:1"]}`, 400, -600},
		{"unknown segment", `{"segments": ["host:9"]}`, 404, -101},
		{"unknown target", `{"segments": ["host:1"], "target_segments": ["host:9"]}`, 404, -101},
		{"target drained", `{"segments": ["host:1"], "target_segments": ["host:1"]}`, 400, -600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out := httpDo(t, http.MethodPost, base+"/api/v1/drain_jobs", tc.body)
			assert.Equal(t, status, tc.status, "%v", out)
			assert.Equal(t, out["success"], false)
			assert.Equal(t, out["error_code"], tc.code)
		})
	}

	status, out := httpDo(t, http.MethodPost, base+"/api/v1/drain_jobs",
		`{"segments": ["host:1"], "target_segments": ["host:2"], "max_concurrency": 2}`)
	assert.Equal(t, status, 200, "%v", out)
	assert.Equal(t, out["success"], true)
	assert.Equal(t, out["status"], "CREATED")
	id := out["job_id"].(string)
	status, out = httpDo(t, http.MethodPost, base+"/api/v1/drain_jobs", `{"segments": ["host:1"]}`)
	assert.Equal(t, status, 409, "%v", out)
	assert.Equal(t, out["error_code"], -1010.0)

	status, out = httpDo(t, http.MethodGet, base+"/api/v1/drain_jobs/query?job_id="+id, "")
	assert.Equal(t, status, 200, "%v", out)
	assert.Equal(t, out["job_id"], id)
	assert.Equal(t, out["type_name"], "DRAIN")
	assert.Equal(t, out["status_name"], "CREATED")
	assert.Equal(t, out["status"], 0.0)
	assert.DeepEqual(t, out["segments"], []any{"host:1"})
	svc.Tick()
	_, out = httpDo(t, http.MethodGet, base+"/api/v1/drain_jobs/query?job_id="+id, "")
	assert.Equal(t, out["status_name"], "RUNNING")
	assert.Equal(t, out["active_units"], 1.0)
	_, out = httpDo(t, http.MethodGet, base+"/api/v1/segments/status?segment=host:1", "")
	assert.Equal(t, out["status_name"], "DRAINING")
	assert.Equal(t, out["status"], 2.0)

	status, out = httpDo(t, http.MethodPost, base+"/api/v1/drain_jobs/cancel?job_id="+id, "")
	assert.Equal(t, status, 200, "%v", out)
	assert.Equal(t, out["status"], "CANCELED")
	status, out = httpDo(t, http.MethodPost, base+"/api/v1/drain_jobs/cancel?job_id="+id, "")
	assert.Equal(t, status, 409, "%v", out)
	assert.Equal(t, out["error_code"], -1010.0)
	_, out = httpDo(t, http.MethodGet, base+"/api/v1/segments/status?segment=host:1", "")
	assert.Equal(t, out["status_name"], "OK")

	for _, tc := range []struct {
		method, path string
		status       int
		code         float64
	}{
		{http.MethodGet, "/api/v1/drain_jobs/query", 400, -600},
		{http.MethodGet, "/api/v1/drain_jobs/query?job_id=nope", 400, -600},
		{http.MethodGet, "/api/v1/drain_jobs/query?job_id=123e4567-e89b-42d3-a456-426614174000", 404, -1402},
		{http.MethodPost, "/api/v1/drain_jobs/cancel?job_id=123e4567-e89b-42d3-a456-426614174000", 404, -1402},
		{http.MethodGet, "/api/v1/segments/status", 400, -600},
		{http.MethodGet, "/api/v1/segments/status?segment=host:9", 404, -101},
	} {
		status, out := httpDo(t, tc.method, base+tc.path, "")
		assert.Equal(t, status, tc.status, "%s %s: %v", tc.method, tc.path, out)
		assert.Equal(t, out["error_code"], tc.code, "%s %s", tc.method, tc.path)
	}
}
