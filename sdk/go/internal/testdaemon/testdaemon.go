// Package testdaemon starts a real sandboxd ($SANDBOXD_BIN) for the tests of the SDK and the
// CLI: free loopback ports, a temporary root, stopped with SIGTERM (it must exit 0).
package testdaemon

import (
	"bufio"
	"fmt"
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

// Daemon is a running sandboxd.
type Daemon struct {
	Root     string
	Socket   string
	GRPCPort int
	RESTPort int

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
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	d.cmd.Env = append(d.cmd.Env, "HOME="+home)
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	d.cmd.Stderr = d.cmd.Stdout
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go d.read(out)
	g, err := d.waitLine(`grpc listening on \S+ port (\d+)`)
	if err == nil {
		d.GRPCPort, _ = strconv.Atoi(g)
		var r string
		r, err = d.waitLine(`rest listening on \S+ port (\d+)`)
		d.RESTPort, _ = strconv.Atoi(r)
	}
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
