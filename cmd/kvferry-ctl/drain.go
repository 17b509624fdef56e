package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Drain jobs through the master's admin port (Mooncake's
// /api/v1/drain_jobs endpoints):
//
//	kvferry-ctl --master_admin H drain create [--target SEG]... [--max_concurrency N] SEG...
//	kvferry-ctl --master_admin H drain query JOB...
//	kvferry-ctl --master_admin H drain wait [--max_wait D] JOB
//	kvferry-ctl --master_admin H drain cancel JOB

// adminError is a failure the admin port answered.
type adminError struct {
	Status  int
	Code    int32  `json:"error_code"`
	Message string `json:"error_message"`
}

func (e *adminError) Error() string {
	return fmt.Sprintf("master: HTTP %d: %s (%d)", e.Status, e.Message, e.Code)
}

// adminJSON sends method path (with a JSON body when in is not nil) to the
// master's admin port and decodes its JSON answer into out; an answer
// with success false is an *adminError.
func (o *options) adminJSON(ctx context.Context, method, path string, in, out any) error {
	if o.masterAdmin == "" {
		return errors.New("--master_admin is required")
	}
	base := o.masterAdmin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = strings.NewReader(string(b))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	var head struct {
		Success bool `json:"success"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, b)
	}
	if !head.Success {
		e := &adminError{Status: resp.StatusCode}
		_ = json.Unmarshal(b, e)
		return e
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// drainJob is the answer of /api/v1/drain_jobs/query.
type drainJob struct {
	JobID          string   `json:"job_id"`
	TypeName       string   `json:"type_name"`
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
}

func (j *drainJob) done() bool {
	switch j.StatusName {
	case "SUCCEEDED", "FAILED", "CANCELED":
		return true
	}
	return false
}

func (o *options) queryDrain(ctx context.Context, id string) (*drainJob, error) {
	var j drainJob
	if err := o.adminJSON(ctx, http.MethodGet, "/api/v1/drain_jobs/query?job_id="+url.QueryEscape(id), nil, &j); err != nil {
		return nil, fmt.Errorf("drain job %s: %w", id, err)
	}
	return &j, nil
}

func (o *options) emitJobs(jobs []*drainJob) error {
	var rows [][]string
	for _, j := range jobs {
		rows = append(rows, []string{j.JobID, j.StatusName, strings.Join(j.Segments, ","),
			fmt.Sprint(j.SucceededUnits), fmt.Sprint(j.FailedUnits), fmt.Sprint(j.BlockedUnits), fmt.Sprint(j.ActiveUnits),
			bytesName(float64(j.MigratedBytes)), j.Message})
	}
	return o.emit(jobs, []string{"JOB", "STATUS", "SEGMENTS", "MOVED", "FAILED", "BLOCKED", "ACTIVE", "BYTES", "MESSAGE"}, rows)
}

func cmdDrain(ctx context.Context, o *options, args []string) error {
	const usage = "drain create [--target SEG]... [--max_concurrency N] SEG... | drain query JOB... | drain wait JOB | drain cancel JOB"
	if len(args) == 0 {
		return fmt.Errorf("usage: %s", usage)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "create":
		fs := newSubFlags("drain create")
		var targets listFlag
		fs.Var(&targets, "target", "a segment the replicas may go to (repeat; default: any other)")
		conc := fs.Int("max_concurrency", 0, "moves in flight at once (0: the master's default, 4)")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			return fmt.Errorf("drain create: name the segments to drain")
		}
		req := map[string]any{"segments": fs.Args(), "target_segments": []string(targets)}
		if targets == nil {
			req["target_segments"] = []string{}
		}
		if *conc != 0 {
			req["max_concurrency"] = *conc
		}
		var resp struct {
			JobID  string `json:"job_id"`
			Status string `json:"status"`
		}
		if err := o.adminJSON(ctx, http.MethodPost, "/api/v1/drain_jobs", req, &resp); err != nil {
			return fmt.Errorf("drain %v: %w", fs.Args(), err)
		}
		return o.emit(resp, []string{"JOB", "STATUS"}, [][]string{{resp.JobID, resp.Status}})
	case "query":
		if len(rest) == 0 {
			return fmt.Errorf("drain query: name the jobs")
		}
		var jobs []*drainJob
		for _, id := range rest {
			j, err := o.queryDrain(ctx, id)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
		}
		return o.emitJobs(jobs)
	case "wait":
		fs := newSubFlags("drain wait")
		maxWait := fs.Duration("max_wait", 30*time.Minute, "give up after this long")
		every := fs.Duration("interval", 500*time.Millisecond, "how often to ask")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return fmt.Errorf("drain wait: name one job")
		}
		deadline := time.Now().Add(*maxWait)
		for {
			j, err := o.queryDrain(ctx, fs.Arg(0))
			if err != nil {
				return err
			}
			if j.done() {
				if err := o.emitJobs([]*drainJob{j}); err != nil {
					return err
				}
				if j.StatusName != "SUCCEEDED" {
					return fmt.Errorf("drain job %s: %s: %s", j.JobID, j.StatusName, j.Message)
				}
				return nil
			}
			if !time.Now().Add(*every).Before(deadline) {
				return fmt.Errorf("drain job %s: still %s after %v", j.JobID, j.StatusName, *maxWait)
			}
			t := time.NewTimer(*every)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	case "cancel":
		if len(rest) != 1 {
			return fmt.Errorf("drain cancel: name one job")
		}
		var resp struct {
			JobID  string `json:"job_id"`
			Status string `json:"status"`
		}
		if err := o.adminJSON(ctx, http.MethodPost, "/api/v1/drain_jobs/cancel?job_id="+url.QueryEscape(rest[0]), nil, &resp); err != nil {
			return fmt.Errorf("cancel drain job %s: %w", rest[0], err)
		}
		return o.emit(resp, []string{"JOB", "STATUS"}, [][]string{{resp.JobID, resp.Status}})
	}
	return fmt.Errorf("unknown drain command %q (usage: %s)", args[0], usage)
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// segmentStatus asks the admin port for a segment's state ("DRAINING");
// "-" when it cannot tell.
func (o *options) segmentStatus(ctx context.Context, name string) string {
	var st struct {
		StatusName string `json:"status_name"`
	}
	if err := o.adminJSON(ctx, http.MethodGet, "/api/v1/segments/status?segment="+url.QueryEscape(name), nil, &st); err != nil {
		return "-"
	}
	return st.StatusName
}
