// Package testdaemon starts a real sandboxd ($SANDBOXD_BIN) for the tests of the SDK and the
// CLI: free loopback ports, a temporary root, stopped with SIGTERM (it must exit 0).
package testdaemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Daemon is a running sandboxd (or, from StartRouter, a sandboxd-router).
type Daemon struct {
	Root     string
	Socket   string
	GRPCPort int
	RESTPort int
	// A router's: its main port (gRPC and HTTP), every port it listens on (the main port
	// first) and its metrics port.
	Port, MetricsPort int
	Ports             []int

	cmd     *exec.Cmd
	mu      sync.Mutex
	lines   []string
	newLine *sync.Cond
	exited  chan struct{}
}

// Start starts bin with its root and socket under dir, plus extra flags, and waits (15 s at
// most) until it is ready.
func Start(bin, dir string, extra ...string) (*Daemon, error) {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	d := &Daemon{Root: root, Socket: filepath.Join(dir, "grpc.sock"), exited: make(chan struct{})}
	d.newLine = sync.NewCond(&d.mu)
	args := append([]string{"--listen-host", "127.0.0.1", "--grpc-port", "0", "--rest-port", "0",
		"--root-dir", root, "--grpc-socket", d.Socket, "--shutdown-timeout", "5s"}, extra...)
	home := filepath.Join(dir, "home")
	if err := d.spawn(bin, args, home); err != nil {
		return nil, err
	}
	g, err := d.waitLine(`grpc listening on \S+ port (\d+)`)
	if err == nil {
		d.GRPCPort, _ = strconv.Atoi(g)
		var r string
		r, err = d.waitLine(`rest listening on \S+ port (\d+)`)
		d.RESTPort, _ = strconv.Atoi(r)
	}
	return d.ready(err)
}

// ready waits for the "ready" line unless err; a child that failed is killed.
func (d *Daemon) ready(err error) (*Daemon, error) {
	if err == nil {
		_, err = d.waitLine(`\bready\b`)
	}
	if err != nil {
		d.cmd.Process.Kill()
		<-d.exited
		return nil, err
	}
	return d, nil
}

// spawn starts bin with args and a HOME of its own, its output read into lines.
func (d *Daemon) spawn(bin string, args []string, home string) error {
	d.cmd = exec.Command(bin, args...)
	// A test binary that dies (a panic) takes its daemon along.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// SANDBOXD_TOKEN configures the daemon too: only a test that means it passes it.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SANDBOXD_TOKEN=") && !strings.HasPrefix(kv, "HOME=") {
			d.cmd.Env = append(d.cmd.Env, kv)
		}
	}
	// A HOME of its own: the login shells of terminals read no dotfiles of this machine's.
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	d.cmd.Env = append(d.cmd.Env, "HOME="+home)
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	d.cmd.Stderr = d.cmd.Stdout
	if err := d.cmd.Start(); err != nil {
		return err
	}
	go d.read(out)
	return nil
}

// StartRouter starts the sandboxd-router bin on a free loopback port, loopback pod IPs
// allowed, plus extra flags, and waits until it is ready; dir holds its HOME.
func StartRouter(bin, dir string, extra ...string) (*Daemon, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	metrics := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	d := &Daemon{MetricsPort: metrics, exited: make(chan struct{})}
	d.newLine = sync.NewCond(&d.mu)
	args := []string{"--http-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "",
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metrics), "--allow-loopback-pod-ip",
		"--shutdown-timeout", "5s"}
	if err := d.spawn(bin, append(args, extra...), filepath.Join(dir, "home")); err != nil {
		return nil, err
	}
	p, err := d.waitLine(`router: listening on \S+ port (\d+)`)
	if err == nil {
		d.Port, _ = strconv.Atoi(p)
	}
	if d, err = d.ready(err); err != nil {
		return nil, err
	}
	// Every listener is bound before "ready", in order: the main port first, then the TLS port
	// when --https-bind-address asks for one (port 0: no free-port race).
	rx := regexp.MustCompile(`router: listening on \S+ port (\d+)`)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ln := range d.lines {
		if m := rx.FindStringSubmatch(ln); m != nil {
			n, _ := strconv.Atoi(m[1])
			d.Ports = append(d.Ports, n)
		}
	}
	return d, nil
}

// Metric is the value of a metric of the router's /metrics (the sum of its series).
func (d *Daemon) Metric(name string) (float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", d.MetricsPort))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for _, ln := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(ln, name+" ") || strings.HasPrefix(ln, name+"{") {
			f := strings.Fields(ln)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return 0, err
			}
			sum, found = sum+v, true
		}
	}
	if !found {
		return 0, fmt.Errorf("no metric %s in:\n%s", name, body)
	}
	return sum, nil
}

// ProxiesHTTP says whether the router carries HTTP/1.1 to the sandbox whose REST port on
// 127.0.0.1 is restPort (before its proxy it answered 501).
func (d *Daemon) ProxiesHTTP(restPort int) (bool, error) {
	req, err := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/v1/health", d.Port), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("X-Sandbox-ID", "sb")
	req.Header.Set("X-Sandbox-Pod-IP", "127.0.0.1")
	req.Header.Set("X-Sandbox-Port", strconv.Itoa(restPort))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode != http.StatusNotImplemented, nil
}

// RouterBinary is $SANDBOXD_ROUTER_BIN, or "" with the reason the router's tests skip.
func RouterBinary() (string, string) {
	bin := os.Getenv("SANDBOXD_ROUTER_BIN")
	if bin == "" {
		return "", "SANDBOXD_ROUTER_BIN is not set (a built sandboxd-router is needed; sdk/go/run-tests.sh sets it)"
	}
	return bin, ""
}

func (d *Daemon) read(out interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		d.mu.Lock()
		d.lines = append(d.lines, sc.Text())
		d.newLine.Broadcast()
		d.mu.Unlock()
	}
	d.cmd.Wait()
	close(d.exited)
	d.mu.Lock()
	d.newLine.Broadcast()
	d.mu.Unlock()
}

func (d *Daemon) waitLine(pattern string) (string, error) {
	rx := regexp.MustCompile(pattern)
	deadline := time.Now().Add(15 * time.Second)
	timer := time.AfterFunc(15*time.Second, func() {
		d.mu.Lock()
		d.newLine.Broadcast()
		d.mu.Unlock()
	})
	defer timer.Stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for seen := 0; ; {
		for _, ln := range d.lines[seen:] {
			if m := rx.FindStringSubmatch(ln); m != nil {
				return m[len(m)-1], nil
			}
		}
		seen = len(d.lines)
		select {
		case <-d.exited:
			return "", fmt.Errorf("sandboxd exited:\n%s", strings.Join(d.lines, "\n"))
		default:
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no line %q within 15s:\n%s", pattern, strings.Join(d.lines, "\n"))
		}
		d.newLine.Wait()
	}
}

// Stop sends SIGTERM; the daemon must exit 0 within 15 s.
func (d *Daemon) Stop() error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("sandboxd did not exit within 15s of SIGTERM")
	}
	if !d.cmd.ProcessState.Success() {
		d.mu.Lock()
		defer d.mu.Unlock()
		return fmt.Errorf("sandboxd exited with %v:\n%s", d.cmd.ProcessState, strings.Join(d.lines, "\n"))
	}
	return nil
}

// Binary is $SANDBOXD_BIN, or "" with the reason the tests skip.
func Binary() (string, string) {
	bin := os.Getenv("SANDBOXD_BIN")
	if bin == "" {
		return "", "SANDBOXD_BIN is not set (a built sandboxd is needed; sdk/go/run-tests.sh sets it)"
	}
	return bin, ""
}
