//go:build deployproc

// Package deploy_test runs a kvferry setup on loopback (the metadata server,
// a store master, two kvferry-bench transfer nodes and a store holder, all
// from build/bin) and checks what operators use against it: deploy/ with a
// real Prometheus (Debian's prometheus package: promtool validates the
// scrape configuration and the alert rules, Prometheus scrapes the setup and
// every dashboard and alert expression is evaluated through its HTTP API;
// an expression that returns no series fails), and kvferry-ctl (ctl_test.go).
// Run by tests/deploy/run.sh.
package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/tests/internal/proc"
	"github.com/kvferry/kvferry/tests/internal/suite"
)

// server is a child process whose stdout and stderr lines are scanned
// together (a server's log: kvferry's, Prometheus').
type server struct {
	cmd   *exec.Cmd
	lines chan string
	log   strings.Builder
}

func start(t *testing.T, env []string, name string, args ...string) *server {
	t.Helper()
	p := &server{cmd: exec.Command(name, args...), lines: make(chan string, 1024)}
	p.cmd.Env = append(os.Environ(), env...)
	r, w, err := os.Pipe()
	assert.NilError(t, err)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := p.cmd.StdinPipe()
	assert.NilError(t, err)
	assert.NilError(t, p.cmd.Start(), name)
	w.Close()
	go func() { // until the process exits
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default: // nobody waits for more lines
			}
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	})
	return p
}

// want waits for a line matching re and returns its first group.
func (p *server) want(t *testing.T, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s exited before printing %q:\n%s", p.cmd.Path, re, p.log.String())
			}
			p.log.WriteString(l + "\n")
			if m := rx.FindStringSubmatch(l); m != nil {
				return m[len(m)-1]
			}
		case <-deadline:
			t.Fatalf("%s did not print %q within 60 s:\n%s", p.cmd.Path, re, p.log.String())
		}
	}
}

func promtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("promtool", args...).CombinedOutput()
	assert.NilError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

// cluster is the running setup.
type cluster struct {
	mdAddr, mdConn                        string
	masterAddr, masterMetrics             string
	tgtMetrics, iniMetrics, holderMetrics string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin := suite.BinDir()
	loop := []string{"MC_TCP_BIND_ADDRESS=127.0.0.1", "KVFERRY_LOG_LEVEL=off"}
	md := start(t, nil, filepath.Join(bin, "kvferry-metadata"), "--addr=127.0.0.1", "--port=0")
	mdAddr := md.want(t, `^listening on (\S+)`)
	mdConn := "http://" + mdAddr + "/metadata"
	master := start(t, nil, filepath.Join(bin, "kvferry-master"), "--port=0", "--rpc_address=127.0.0.1",
		"--metrics_host=127.0.0.1", "--metrics_port=0", "--default_kv_lease_ttl=200")
	masterAddr := master.want(t, `^listening on (\S+)`)
	masterMetrics := master.want(t, `^metrics on (\S+)`)

	bench := filepath.Join(bin, "kvferry-bench")
	env := append([]string{"KVFERRY_METRICS_ADDR=127.0.0.1:0"}, loop...)
	tgt := start(t, env, bench, "--mode=target", "--metadata_server="+mdConn, "--local_server_name=node-t",
		"--buffer_size=67108864")
	tgtMetrics := tgt.want(t, `^metrics on (\S+)`)
	tgt.want(t, `target ready`)
	ini := start(t, env, bench, "--mode=initiator", "--metadata_server="+mdConn, "--local_server_name=node-i",
		"--segment_id=node-t", "--buffer_size=67108864", "--operation=write", "--block_size=4096,65536",
		"--batch_size=16", "--threads=2", "--duration=600", "--quiet")
	iniMetrics := ini.want(t, `^metrics on (\S+)`)
	holder := start(t, env, bench, "store", "-mode=holder", "-master="+masterAddr, "-segment=33554432")
	holderMetrics := holder.want(t, `^metrics on (\S+)`)
	holder.want(t, `^ready`)
	// A store run that overfills the holder: puts, gets, evictions.
	run := exec.Command(bench, "store", "-mode=run", "-master="+masterAddr, "-size=1048576", "-ops=64", "-threads=2", "-quiet", "-keep")
	run.Env = append(os.Environ(), loop...)
	out, err := run.CombinedOutput()
	assert.NilError(t, err, "store run:\n%s", out)
	return &cluster{mdAddr: mdAddr, mdConn: mdConn, masterAddr: masterAddr, masterMetrics: masterMetrics,
		tgtMetrics: tgtMetrics, iniMetrics: iniMetrics, holderMetrics: holderMetrics}
}

func TestCluster(t *testing.T) {
	c := startCluster(t)
	t.Run("prometheus", func(t *testing.T) { checkPrometheus(t, c) })
	t.Run("kvferry-ctl", func(t *testing.T) { checkCtl(t, c) })
}

func checkPrometheus(t *testing.T, c *cluster) {
	for _, tool := range []string{"prometheus", "promtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s missing (Debian package prometheus; make test installs it: scripts/test-deps.sh)", tool)
		}
	}
	deploy := filepath.Join(suite.Root(), "deploy")
	promtool(t, "check", "config", filepath.Join(deploy, "prometheus", "prometheus.yml"))
	promtool(t, "check", "rules", filepath.Join(deploy, "prometheus", "alerts.yml"))

	// Prometheus with the deploy rules, scraping every second.
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: kvferry
    static_configs:
      - targets: [%q, %q, %q]
  - job_name: kvferry-master
    static_configs:
      - targets: [%q]
  - job_name: kvferry-metadata
    static_configs:
      - targets: [%q]
`, filepath.Join(deploy, "prometheus", "alerts.yml"), c.tgtMetrics, c.iniMetrics, c.holderMetrics, c.masterMetrics, c.mdAddr)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	assert.NilError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	promtool(t, "check", "config", cfgPath)
	promAddr := "127.0.0.1:" + strconv.Itoa(proc.FreePort(t))
	prom := start(t, nil, "prometheus", "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	_ = prom
	api := "http://" + promAddr
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}

	// Every target up, then a few more scrapes so that rates have samples.
	waitFor(t, 60*time.Second, "every target up", func() (bool, string) {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					ScrapeURL string `json:"scrapeUrl"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := getJSON(hc, api+"/api/v1/targets", &r); err != nil {
			return false, err.Error()
		}
		up, msg := 0, ""
		for _, tg := range r.Data.ActiveTargets {
			if tg.Health == "up" {
				up++
			} else {
				msg += tg.ScrapeURL + ": " + tg.Health + " " + tg.LastError + "; "
			}
		}
		return up == 5, fmt.Sprintf("%d of %d up: %s", up, len(r.Data.ActiveTargets), msg)
	})
	time.Sleep(6 * time.Second)

	var exprs []namedExpr
	exprs = append(exprs, dashboardExprs(t, filepath.Join(deploy, "grafana", "kvferry.json"))...)
	exprs = append(exprs, ruleExprs(t, filepath.Join(deploy, "prometheus", "alerts.yml"))...)
	assert.Assert(t, len(exprs) > 40, "only %d expressions", len(exprs))
	var empty []string
	for _, e := range exprs {
		n, err := query(hc, api, e.expr)
		switch {
		case err != nil:
			empty = append(empty, fmt.Sprintf("%s: %s: %v", e.name, e.expr, err))
		case n == 0:
			empty = append(empty, fmt.Sprintf("%s: no series: %s", e.name, e.expr))
		}
	}
	assert.Assert(t, len(empty) == 0, "%d of %d expressions failed:\n%s", len(empty), len(exprs), strings.Join(empty, "\n"))
	t.Logf("%d dashboard and alert expressions return series", len(exprs))
}

type namedExpr struct{ name, expr string }

// dashboardExprs returns every panel target of the Grafana dashboard, with
// Grafana's interval variables replaced.
func dashboardExprs(t *testing.T, path string) []namedExpr {
	t.Helper()
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	assert.NilError(t, json.Unmarshal(b, &d))
	var out []namedExpr
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		assert.Assert(t, len(p.Targets) > 0, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			e := strings.NewReplacer("$__rate_interval", "30s", "$__interval", "5s", "$__range", "1m").Replace(tg.Expr)
			out = append(out, namedExpr{"panel " + p.Title, e})
		}
	}
	return out
}

// ruleExprs returns every recording rule's expression and every alert's
// signal: its expression without the threshold that decides whether it
// fires (which holds no series while all is well).
func ruleExprs(t *testing.T, path string) []namedExpr {
	t.Helper()
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	var f struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
				Alert  string `yaml:"alert"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	assert.NilError(t, yaml.Unmarshal(b, &f))
	var out []namedExpr
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out = append(out, namedExpr{"record " + r.Record, r.Expr}, namedExpr{"recorded " + r.Record, r.Record})
				continue
			}
			sig := signal(r.Expr)
			assert.Assert(t, sig != r.Expr, "alert %s: no threshold comparison at the top level of %q", r.Alert, r.Expr)
			out = append(out, namedExpr{"alert " + r.Alert, sig})
		}
	}
	return out
}

// signal cuts expr at its last top-level comparison (outside parentheses,
// braces, brackets and strings) and returns the left side.
func signal(expr string) string {
	depth, cut := 0, -1
	var quote byte
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '{' || c == '[':
			depth++
		case c == ')' || c == '}' || c == ']':
			depth--
		case depth == 0 && (c == '>' || c == '<' || (c == '=' && i+1 < len(expr) && expr[i+1] == '=') || (c == '!' && i+1 < len(expr) && expr[i+1] == '=')):
			cut = i
			if i+1 < len(expr) && expr[i+1] == '=' {
				i++
			}
		}
	}
	if cut < 0 {
		return expr
	}
	return strings.TrimSpace(expr[:cut])
}

// query evaluates expr now and returns the number of series.
func query(hc *http.Client, api, expr string) (int, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(hc, api+"/api/v1/query?query="+url.QueryEscape(expr), &r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s", r.Error)
	}
	if r.Data.ResultType == "scalar" {
		return 1, nil
	}
	return len(r.Data.Result), nil
}

func getJSON(hc *http.Client, u string, v any) error {
	resp, err := hc.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: HTTP %d: %.200s", u, resp.StatusCode, b)
	}
	return nil
}

func waitFor(t *testing.T, d time.Duration, what string, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := f()
		if ok {
			return
		}
		last = msg
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %s", what, d, last)
}
