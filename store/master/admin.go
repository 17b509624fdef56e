package master

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvferry/kvferry/store/wire"
)

// adminHandler serves the admin HTTP endpoints of mooncake_master that
// tools use (specs/mooncake.md §7.8): /metrics (Prometheus text from the
// private registry), /health, /role, /leader, /get_all_segments (one segment
// name per line), /get_all_keys (one key per line) and /query_key?key=.
// The key endpoints take an optional tenant_id= (default "default"). The
// drain job and segment status endpoints are in admin_drain.go.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		view := s.Leader()
		writeJSON(w, http.StatusOK, map[string]any{
			"status":         "ok",
			"role":           s.Role(),
			"service_ready":  s.active.Load() != nil,
			"leader_address": view.Address,
			"view_version":   view.Version,
		})
	})
	mux.HandleFunc("GET /role", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(s.Role()))
	})
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, _ *http.Request) {
		view := s.Leader()
		writeJSON(w, http.StatusOK, map[string]any{
			"present":        view.Address != "",
			"leader_address": view.Address,
			"view_version":   view.Version,
		})
	})
	mux.HandleFunc("GET /get_all_segments", func(w http.ResponseWriter, _ *http.Request) {
		svc := s.active.Load()
		if svc == nil {
			http.Error(w, "not the leader", http.StatusServiceUnavailable)
			return
		}
		var b strings.Builder
		seen := map[string]bool{}
		for _, seg := range svc.Segments() {
			if !seen[seg.Name] {
				seen[seg.Name] = true
				b.WriteString(seg.Name + "\n")
			}
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(b.String()))
	})
	mux.HandleFunc("GET /get_all_keys", func(w http.ResponseWriter, r *http.Request) {
		svc := s.active.Load()
		if svc == nil {
			http.Error(w, "not the leader", http.StatusServiceUnavailable)
			return
		}
		keys, err := svc.Keys(r.URL.Query().Get("tenant_id"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		var b strings.Builder
		for _, k := range keys {
			b.WriteString(k + "\n")
		}
		_, _ = w.Write([]byte(b.String()))
	})
	mux.HandleFunc("GET /api/v1/tenants", func(w http.ResponseWriter, _ *http.Request) {
		svc := s.active.Load()
		if svc == nil {
			http.Error(w, "not the leader", http.StatusServiceUnavailable)
			return
		}
		type tenant struct {
			Tenant       string `json:"tenant_id"`
			Objects      uint64 `json:"objects"`
			Bytes        uint64 `json:"bytes"`
			QuotaBytes   uint64 `json:"quota_bytes"`
			QuotaObjects uint64 `json:"quota_objects"`
			Refused      uint64 `json:"quota_refused"`
		}
		out := []tenant{}
		for _, u := range svc.TenantUsage() {
			out = append(out, tenant{u.Tenant, u.Objects, u.Bytes, u.Quota.Bytes, u.Quota.Objects, u.Refused})
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "tenants": out})
	})
	mux.HandleFunc("GET /query_key", func(w http.ResponseWriter, r *http.Request) {
		svc := s.active.Load()
		if svc == nil {
			http.Error(w, "not the leader", http.StatusServiceUnavailable)
			return
		}
		list, err := svc.GetReplicaList(r.URL.Query().Get("tenant_id"), r.URL.Query().Get("key"))
		if err != nil {
			c := wire.CodeOf(err)
			writeJSON(w, http.StatusNotFound, map[string]any{
				"success": false, "error_code": int32(c), "error_message": c.String(),
			})
			return
		}
		type buf struct {
			TransportEndpoint string `json:"transport_endpoint_"`
			BufferAddress     uint64 `json:"buffer_address_"`
			Size              uint64 `json:"size_"`
			Protocol          string `json:"protocol_"`
		}
		data := make([]buf, len(list.Replicas))
		for i, rep := range list.Replicas {
			data[i] = buf{rep.SegmentName, rep.Addr, rep.Size, rep.Protocol}
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "data": data})
	})
	s.drainHandlers(mux)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
