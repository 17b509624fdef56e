// Package thirdparty_test runs programs we did not write on the fake verbs
// provider (tests/rdma/fakeverbs), unmodified, from Debian's packages:
// rdma-core's ibv_devinfo, ibv_rc_pingpong and ibv_srq_pingpong
// (ibverbs-utils) and perftest's ib_write_bw, ib_read_bw, ib_write_lat and
// ib_send_bw. They are linked against the real libibverbs.so.1 and load the
// fake through LD_LIBRARY_PATH; each pair is a server and a client process
// on 127.0.0.1 (rdma_cm off: the programs exchange their QP numbers and
// GIDs over TCP, then move the data over the fake's verbs). A test checks
// that each program exits 0 and reports its results; it asserts nothing
// about speed. Missing packages fail the test with the apt-get command
// that installs them.
package thirdparty_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

// The programs and the Debian packages that install them.
var programs = []struct{ name, pkg string }{
	{"ibv_devinfo", "ibverbs-utils"},
	{"ibv_rc_pingpong", "ibverbs-utils"},
	{"ibv_srq_pingpong", "ibverbs-utils"},
	{"ib_write_bw", "perftest"},
	{"ib_read_bw", "perftest"},
	{"ib_write_lat", "perftest"},
	{"ib_send_bw", "perftest"},
}

// deadline bounds every program run: the fake and the programs are small,
// but make test runs this beside every other package.
const deadline = 2 * time.Minute

// dev is the fake device every program is pointed at (-d/--ib-dev): were
// the real libibverbs loaded instead of the fake, it would not find it.
const dev = "fake_mlx5_0"

// requirePrograms fails t unless every program is installed, naming the
// command that installs the missing ones.
func requirePrograms(t *testing.T) {
	t.Helper()
	var missing, pkgs []string
	for _, p := range programs {
		if _, err := exec.LookPath(p.name); err != nil {
			missing = append(missing, p.name)
			if len(pkgs) == 0 || pkgs[len(pkgs)-1] != p.pkg {
				pkgs = append(pkgs, p.pkg)
			}
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s not installed; run: sudo apt-get update && sudo apt-get install -y --no-install-recommends %s",
			strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
}

// fake is one fabric of the fake provider: its socket directory and the
// environment that loads it.
type fake struct{ env []string }

// newFake builds the fake provider and returns a fabric with extra
// environment (FAKEVERBS_LINK_LAYER=ib ...).
func newFake(t *testing.T, extra ...string) *fake {
	t.Helper()
	requirePrograms(t)
	lib, err := fakeverbs.Build()
	assert.NilError(t, err)
	dir, err := os.MkdirTemp("", "fv-3p-") // short: the sockets' paths have a limit
	assert.NilError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	env := append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Dir(lib))
	env = append(env, fakeverbs.Env(lib, dir, dev)...)
	return &fake{env: append(env, extra...)}
}

// proc is a started program and its combined output.
type proc struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
}

func (f *fake) start(t *testing.T, ctx context.Context, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.CommandContext(ctx, name, args...), done: make(chan error, 1)}
	p.cmd.Env = f.env
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.out
	p.cmd.WaitDelay = 5 * time.Second
	assert.NilError(t, p.cmd.Start(), "start %s", name)
	go func() { p.done <- p.cmd.Wait() }()
	return p
}

// checkOutput fails t when out shows the loader or the fake refusing
// something.
func checkOutput(t *testing.T, what, out string) {
	t.Helper()
	for _, bad := range []string{"no version information available", "undefined symbol", "not implemented by the fake provider"} {
		assert.Assert(t, !strings.Contains(out, bad), "%s: %q in its output:\n%s", what, bad, out)
	}
}

// run runs one program to completion and returns its output.
func (f *fake) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	p := f.start(t, ctx, name, args...)
	err := <-p.done
	what := name + " " + strings.Join(args, " ")
	assert.NilError(t, err, "%s:\n%s", what, p.out.String())
	checkOutput(t, what, p.out.String())
	return p.out.String()
}

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// listening reports whether a socket of this network namespace listens on
// TCP port (/proc/net/tcp and tcp6: a probe connection would be taken by
// the server for its client).
func listening(port string) bool {
	n, _ := strconv.Atoi(port)
	want := fmt.Sprintf(":%04X ", n)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", want) && fields[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// pair runs name as a server, then as its client on 127.0.0.1 (the port
// option portFlag is added to both), and returns both outputs.
func (f *fake) pair(t *testing.T, name, portFlag string, args ...string) (server, client string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	what := name + " " + strings.Join(args, " ")
	var srv *proc
	var port string
	// The port was free when chosen: another test may take it before the
	// server binds it, so a server that exits before listening is retried.
	for try := 0; srv == nil; try++ {
		port = freePort(t)
		p := f.start(t, ctx, name, append(args, portFlag, port)...)
		for srv == nil {
			if listening(port) {
				srv = p
				break
			}
			select {
			case err := <-p.done:
				if try == 2 {
					t.Fatalf("%s: the server exited (%v) before listening:\n%s", what, err, p.out.String())
				}
			case <-ctx.Done():
				t.Fatalf("%s: the server never listened on port %s:\n%s", what, port, p.out.String())
			case <-time.After(10 * time.Millisecond):
				continue
			}
			break
		}
	}
	cli := f.start(t, ctx, name, append(args, portFlag, port, "127.0.0.1")...)
	var wg sync.WaitGroup
	var cliErr error
	wg.Add(1)
	go func() { defer wg.Done(); cliErr = <-cli.done }()
	srvErr := <-srv.done
	wg.Wait()
	server, client = srv.out.String(), cli.out.String()
	assert.NilError(t, srvErr, "%s server:\n%s\nclient:\n%s", what, server, client)
	assert.NilError(t, cliErr, "%s client:\n%s\nserver:\n%s", what, client, server)
	checkOutput(t, what+" (server)", server)
	checkOutput(t, what+" (client)", client)
	return server, client
}

func TestDevinfo(t *testing.T) {
	t.Parallel()
	t.Run("roce", func(t *testing.T) {
		t.Parallel()
		f := newFake(t)
		out := f.run(t, "ibv_devinfo", "-d", dev)
		for _, want := range []string{"hca_id:\t" + dev, "transport:\t\t\tInfiniBand (0)", "board_id:\t\t\tFAKEVERBS_0000",
			"phys_port_cnt:\t\t\t1", "state:\t\t\tPORT_ACTIVE (4)", "active_mtu:\t\t4096 (5)", "link_layer:\t\tEthernet"} {
			assert.Assert(t, strings.Contains(out, want), "ibv_devinfo: no %q in:\n%s", want, out)
		}
		out = f.run(t, "ibv_devinfo", "-v", "-d", dev)
		for _, want := range []string{"max_qp_wr:\t\t\t16384", "max_srq:\t\t\t65536", "max_srq_sge:\t\t\t4",
			"SRQ_RESIZE", "gid_tbl_len:\t\t2", "phys_state:\t\tLINK_UP (5)", "num_comp_vectors:\t\t1"} {
			assert.Assert(t, strings.Contains(out, want), "ibv_devinfo -v: no %q in:\n%s", want, out)
		}
		// Index 0 is empty (not printed); index 1 is a RoCE v2 GID.
		assert.Assert(t, !strings.Contains(out, "GID[  0]"), "ibv_devinfo -v printed the empty GID 0:\n%s", out)
		assert.Assert(t, regexp.MustCompile(`GID\[  1\]:\t\tfe80::[0-9a-f:]+, RoCE v2`).MatchString(out), "ibv_devinfo -v:\n%s", out)
		out = f.run(t, "ibv_devinfo", "-l")
		assert.Assert(t, strings.Contains(out, "1 HCA found:") && strings.Contains(out, dev), "ibv_devinfo -l:\n%s", out)
	})
	t.Run("ib", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, "FAKEVERBS_LINK_LAYER=ib")
		out := f.run(t, "ibv_devinfo", "-v", "-d", dev)
		assert.Assert(t, strings.Contains(out, "link_layer:\t\tInfiniBand"), "ibv_devinfo -v:\n%s", out)
		m := regexp.MustCompile(`port_lid:\t\t(\d+)`).FindStringSubmatch(out)
		assert.Assert(t, m != nil && m[1] != "0", "ibv_devinfo -v: no LID:\n%s", out)
		assert.Assert(t, regexp.MustCompile(`GID\[  0\]:\t\tfe80:0000:0000:0000:`).MatchString(out), "ibv_devinfo -v:\n%s", out)
	})
}

var (
	pingBytes = regexp.MustCompile(`(?m)^(\d+) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec$`)
	pingIters = regexp.MustCompile(`(?m)^(\d+) iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`)
)

// checkPingpong checks a pingpong's report: iters round trips of size
// bytes each way.
func checkPingpong(t *testing.T, what, out string, size, iters int) {
	t.Helper()
	b, i := pingBytes.FindStringSubmatch(out), pingIters.FindStringSubmatch(out)
	assert.Assert(t, b != nil && i != nil, "%s: no result in:\n%s", what, out)
	assert.Equal(t, b[1], strconv.Itoa(2*size*iters), "%s:\n%s", what, out)
	assert.Equal(t, i[1], strconv.Itoa(iters), "%s:\n%s", what, out)
}

func TestRCPingpong(t *testing.T) {
	t.Parallel()
	const size, iters = 4096, 50
	cases := []struct {
		name string
		env  []string
		args []string
	}{
		{"send", nil, []string{"-g", "1"}},
		{"events", nil, []string{"-g", "1", "-e"}},
		{"wr-api", nil, []string{"-g", "1", "-N"}},       // ibv_qp_to_qp_ex, ibv_wr_send
		{"inline", nil, []string{"-g", "1", "-s", "64"}}, // max_inline_data from ibv_query_qp
		{"check", nil, []string{"-g", "1", "-c"}},        // validates the received bytes
		{"ib-lid", []string{"FAKEVERBS_LINK_LAYER=ib"}, nil},
		{"ib-gid", []string{"FAKEVERBS_LINK_LAYER=ib"}, []string{"-g", "0", "-e"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, c.env...)
			n := size
			args := append([]string{"-d", dev, "-n", strconv.Itoa(iters)}, c.args...)
			if c.name == "inline" {
				n = 64
			} else {
				args = append(args, "-s", strconv.Itoa(size))
			}
			srv, cli := f.pair(t, "ibv_rc_pingpong", "-p", args...)
			checkPingpong(t, "server", srv, n, iters)
			checkPingpong(t, "client", cli, n, iters)
		})
	}
}

func TestSRQPingpong(t *testing.T) {
	t.Parallel()
	const size, iters = 4096, 40
	for _, c := range []struct {
		name string
		args []string
	}{
		{"poll", nil},
		{"events", []string{"-e"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			args := append([]string{"-d", dev, "-g", "1", "-q", "4", "-n", strconv.Itoa(iters), "-s", strconv.Itoa(size)}, c.args...)
			srv, cli := f.pair(t, "ibv_srq_pingpong", "-p", args...)
			checkPingpong(t, "server", srv, size, iters)
			checkPingpong(t, "client", cli, size, iters)
			// Four QPs on one shared receive queue, each told to the peer.
			assert.Equal(t, strings.Count(cli, "remote address:"), 4, "client:\n%s", cli)
		})
	}
}

// perftestRow returns the fields of the result line under perftest's table
// header (the line naming header).
func perftestRow(t *testing.T, what, out, header string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "#bytes") && strings.Contains(l, header) && i+1 < len(lines) {
			return strings.Fields(lines[i+1])
		}
	}
	t.Fatalf("%s: no %q table in:\n%s", what, header, out)
	return nil
}

func positive(t *testing.T, what, field string) {
	t.Helper()
	v, err := strconv.ParseFloat(field, 64)
	assert.Assert(t, err == nil && v > 0, "%s: %q is not a positive number", what, field)
}

func TestPerftest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, prog string
		env        []string
		args       []string
		lat        bool
	}{
		{"write_bw", "ib_write_bw", nil, []string{"-x", "1", "-s", "65536"}, false}, // ibv_wr_* API
		{"write_bw-old-post-send", "ib_write_bw", nil, []string{"-x", "1", "-s", "65536", "--use_old_post_send"}, false},
		{"read_bw", "ib_read_bw", nil, []string{"-x", "1", "-s", "65536"}, false},
		{"read_bw-events", "ib_read_bw", nil, []string{"-x", "1", "-s", "4096", "-e"}, false},
		{"write_lat", "ib_write_lat", nil, []string{"-x", "1", "-s", "8"}, true}, // inline data
		{"send_bw-srq", "ib_send_bw", nil, []string{"-x", "1", "-s", "4096", "--use-srq"}, false},
		{"write_bw-ib", "ib_write_bw", []string{"FAKEVERBS_LINK_LAYER=ib"}, []string{"-s", "65536"}, false},
	}
	const iters = 100
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, c.env...)
			// -F: no failure on the CPU frequency's jitter (a shared machine).
			args := append([]string{"-d", dev, "-F", "-n", strconv.Itoa(iters)}, c.args...)
			srv, cli := f.pair(t, c.prog, "-p", args...)
			var size string
			for i, a := range c.args {
				if a == "-s" {
					size = c.args[i+1]
				}
			}
			for _, o := range []struct{ side, out string }{{"server", srv}, {"client", cli}} {
				assert.Assert(t, strings.Contains(o.out, "Device         : "+dev), "%s %s:\n%s", c.prog, o.side, o.out)
			}
			if c.lat {
				// #bytes #iterations t_min t_max t_typical t_avg ...
				row := perftestRow(t, c.prog+" client", cli, "t_avg[usec]")
				assert.Assert(t, len(row) >= 6, "%s client: %v", c.prog, row)
				assert.Equal(t, row[0], size)
				assert.Equal(t, row[1], strconv.Itoa(iters))
				positive(t, c.prog+" t_avg", row[5])
				return
			}
			// #bytes #iterations BW_peak BW_average MsgRate
			row := perftestRow(t, c.prog+" client", cli, "BW average[MB/sec]")
			assert.Assert(t, len(row) >= 5, "%s client: %v", c.prog, row)
			assert.Equal(t, row[0], size)
			assert.Equal(t, row[1], strconv.Itoa(iters))
			positive(t, c.prog+" BW average", row[3])
			row = perftestRow(t, c.prog+" server", srv, "BW average[MB/sec]")
			assert.Equal(t, row[0], size)
		})
	}
}
