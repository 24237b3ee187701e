package sandboxd_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// daemon is a real sandboxd ($SANDBOXD_BIN) on free loopback ports with a temporary root.
type daemon struct {
	cmd      *exec.Cmd
	root     string
	socket   string
	grpcPort int
	restPort int
	mu       sync.Mutex
	lines    []string
	newLine  *sync.Cond
	exited   chan struct{}
}

var shared *daemon

func TestMain(m *testing.M) {
	bin := os.Getenv("SANDBOXD_BIN")
	if bin == "" {
		fmt.Println("SKIP: SANDBOXD_BIN is not set (a built sandboxd is needed; sdk/go/run-tests.sh sets it)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "sdk-go-")
	if err != nil {
		panic(err)
	}
	shared, err = startDaemon(bin, dir)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	os.Setenv("SANDBOXD_GRPC_PORT", strconv.Itoa(shared.grpcPort))
	os.Setenv("SANDBOXD_REST_PORT", strconv.Itoa(shared.restPort))
	code := m.Run()
	if err := shared.stop(); err != nil {
		fmt.Println(err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func startDaemon(bin, dir string, extra ...string) (*daemon, error) {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	d := &daemon{root: root, socket: filepath.Join(dir, "grpc.sock"), exited: make(chan struct{})}
	d.newLine = sync.NewCond(&d.mu)
	args := append([]string{"--listen-host", "127.0.0.1", "--grpc-port", "0", "--rest-port", "0",
		"--root-dir", root, "--grpc-socket", d.socket, "--shutdown-timeout", "5s"}, extra...)
	d.cmd = exec.Command(bin, args...)
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	d.cmd.Stderr = d.cmd.Stdout
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
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
	}()
	g, err := d.waitLine(`grpc listening on \S+ port (\d+)`)
	if err == nil {
		d.grpcPort, _ = strconv.Atoi(g)
		var r string
		r, err = d.waitLine(`rest listening on \S+ port (\d+)`)
		d.restPort, _ = strconv.Atoi(r)
	}
	if err == nil {
		_, err = d.waitLine(`\bready\b`)
	}
	if err != nil {
		d.cmd.Process.Kill()
		return nil, err
	}
	return d, nil
}

func (d *daemon) waitLine(pattern string) (string, error) {
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
				if len(m) > 1 {
					return m[1], nil
				}
				return m[0], nil
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

func (d *daemon) stop() error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		return fmt.Errorf("sandboxd did not exit within 15s of SIGTERM")
	}
	if !d.cmd.ProcessState.Success() {
		return fmt.Errorf("sandboxd exited with %v:\n%s", d.cmd.ProcessState, strings.Join(d.lines, "\n"))
	}
	return nil
}

func (d *daemon) client(t testing.TB, opts ...sandboxd.Option) *sandboxd.Client {
	t.Helper()
	opts = append([]sandboxd.Option{sandboxd.WithGRPCPort(d.grpcPort), sandboxd.WithRESTPort(d.restPort),
		sandboxd.WithTimeout(20 * time.Second)}, opts...)
	c, err := sandboxd.New("127.0.0.1", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ctx is a test's context, bounded.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return c
}

// area is a fresh directory under the root for one test, relative to the root.
func area(t testing.TB) string {
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(t.Name(), "_")
	if err := os.MkdirAll(filepath.Join(shared.root, name), 0o755); err != nil {
		t.Fatal(err)
	}
	return name
}
