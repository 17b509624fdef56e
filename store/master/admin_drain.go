package master

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kvferry/kvferry/store/wire"
)

// The drain job endpoints of mooncake_master's admin port
// (master_admin_service.cpp), with its request and answer fields:
//
//	POST /api/v1/drain_jobs          {"segments": [...], "target_segments": [...], "max_concurrency": 4}
//	GET  /api/v1/drain_jobs/query?job_id=ID
//	POST /api/v1/drain_jobs/cancel?job_id=ID
//	GET  /api/v1/segments/status?segment=NAME
//
// A failure answers {"success": false, "error_code": CODE, "error_message":
// NAME} with Mooncake's HTTP status of the code (adminHTTPStatus); a
// master that does not lead answers 503 with UNAVAILABLE_IN_CURRENT_MODE.

// maxAdminBody bounds a JSON request body of the admin port.
const maxAdminBody = 1 << 20

// adminHTTPStatus is Mooncake's HTTP status of a failure's code
// (ErrorCodeToHttpStatus).
func adminHTTPStatus(c wire.Code) int {
	switch c {
	case wire.ErrInvalidParams:
		return http.StatusBadRequest
	case wire.ErrJobNotFound, wire.ErrSegmentNotFound, wire.ErrObjectNotFound:
		return http.StatusNotFound
	case wire.ErrUnavailableInMode, wire.ErrUnavailableInStatus:
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// writeAdminError answers a failure with err's code.
func writeAdminError(w http.ResponseWriter, status int, err error) {
	c := wire.CodeOf(err)
	writeJSON(w, status, map[string]any{"success": false, "error_code": int32(c), "error_message": c.String()})
}

// adminService returns the active Service, or answers 503 and nil.
func (s *Server) adminService(w http.ResponseWriter) *Service {
	svc := s.active.Load()
	if svc == nil {
		writeAdminError(w, http.StatusServiceUnavailable, fmt.Errorf("not the leader: %w", wire.ErrUnavailableInMode))
	}
	return svc
}

// httpJob is the answer of /api/v1/drain_jobs/query (Mooncake's
// HttpQueryDrainJobResponse), plus dropped_units.
type httpJob struct {
	Success        bool     `json:"success"`
	JobID          string   `json:"job_id"`
	Type           int32    `json:"type"`
	TypeName       string   `json:"type_name"`
	Status         int32    `json:"status"`
	StatusName     string   `json:"status_name"`
	CreatedMs      int64    `json:"created_at_ms_epoch"`
	UpdatedMs      int64    `json:"last_updated_at_ms_epoch"`
	Segments       []string `json:"segments"`
	SucceededUnits uint64   `json:"succeeded_units"`
	FailedUnits    uint64   `json:"failed_units"`
	BlockedUnits   uint64   `json:"blocked_units"`
	ActiveUnits    uint64   `json:"active_units"`
	DroppedUnits   uint64   `json:"dropped_units"`
	MigratedBytes  uint64   `json:"migrated_bytes"`
	Message        string   `json:"message"`
	ErrorCode      int32    `json:"error_code"`
	ErrorMessage   string   `json:"error_message"`
}

// JobTypeName is Mooncake's name of a job type ("DRAIN").
func JobTypeName(t wire.JobType) string { return strings.TrimPrefix(t.String(), "JOB_TYPE_") }

// JobStatusName is Mooncake's name of a job status ("RUNNING").
func JobStatusName(st wire.JobStatus) string { return strings.TrimPrefix(st.String(), "JOB_STATUS_") }

// jobRequest reads a drain-job request's job_id and the serving service;
// it answers the request itself (and returns a nil service) when the id is
// missing or malformed or no service serves.
func (s *Server) jobRequest(w http.ResponseWriter, r *http.Request) (string, *Service) {
	id := r.URL.Query().Get("job_id")
	if !validUUID(id) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false,
			"error_code": int32(wire.ErrInvalidParams), "error_message": "Missing or invalid job_id"})
		return "", nil
	}
	return id, s.adminService(w)
}

func (s *Server) drainHandlers(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/v1/drain_jobs", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Segments       []string `json:"segments"`
			TargetSegments []string `json:"target_segments"`
			MaxConcurrency *int64   `json:"max_concurrency"`
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
		if err == nil && len(b) > maxAdminBody {
			err = fmt.Errorf("body over %d bytes", maxAdminBody)
		}
		if err == nil {
			err = json.Unmarshal(b, &body)
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"success": false,
				"error_code": int32(wire.ErrInvalidParams), "error_message": "Invalid JSON body: " + err.Error()})
			return
		}
		req := DrainJobRequest{Segments: body.Segments, Targets: body.TargetSegments}
		if mc := body.MaxConcurrency; mc != nil {
			// Mooncake refuses 0 (and a negative count does not parse
			// into its uint32).
			req.MaxConcurrency = int(min(*mc, MaxDrainConcurrency))
			if *mc <= 0 {
				req.MaxConcurrency = -1
			}
		}
		svc := s.adminService(w)
		if svc == nil {
			return
		}
		id, err := svc.CreateDrainJob(req)
		if err != nil {
			writeAdminError(w, adminHTTPStatus(wire.CodeOf(err)), err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "job_id": id, "status": "CREATED",
			"error_code": 0, "error_message": ""})
	})
	mux.HandleFunc("GET /api/v1/drain_jobs/query", func(w http.ResponseWriter, r *http.Request) {
		id, svc := s.jobRequest(w, r)
		if svc == nil {
			return
		}
		j, err := svc.QueryDrainJob(id)
		if err != nil {
			writeAdminError(w, adminHTTPStatus(wire.CodeOf(err)), err)
			return
		}
		writeJSON(w, http.StatusOK, httpJob{Success: true, JobID: j.ID, Type: int32(j.Type), TypeName: JobTypeName(j.Type),
			Status: int32(j.Status), StatusName: JobStatusName(j.Status), CreatedMs: j.Created.UnixMilli(),
			UpdatedMs: j.Updated.UnixMilli(), Segments: j.Segments, SucceededUnits: j.SucceededUnits,
			FailedUnits: j.FailedUnits, BlockedUnits: j.BlockedUnits, ActiveUnits: j.ActiveUnits,
			DroppedUnits: j.DroppedUnits, MigratedBytes: j.MigratedBytes, Message: j.Message})
	})
	mux.HandleFunc("POST /api/v1/drain_jobs/cancel", func(w http.ResponseWriter, r *http.Request) {
		id, svc := s.jobRequest(w, r)
		if svc == nil {
			return
		}
		if err := svc.CancelDrainJob(id); err != nil {
			writeAdminError(w, adminHTTPStatus(wire.CodeOf(err)), err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "job_id": id, "status": "CANCELED",
			"error_code": 0, "error_message": ""})
	})
	mux.HandleFunc("GET /api/v1/segments/status", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("segment")
		if name == "" {
			writeJSON(w, http.StatusBadRequest, map[string]any{"success": false,
				"error_code": int32(wire.ErrInvalidParams), "error_message": "Missing segment query parameter"})
			return
		}
		svc := s.adminService(w)
		if svc == nil {
			return
		}
		st, err := svc.SegmentStatusOf(name)
		if err != nil {
			writeAdminError(w, adminHTTPStatus(wire.CodeOf(err)), err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "segment": name, "status": int32(st),
			"status_name": st.String(), "error_code": 0, "error_message": ""})
	})
}
