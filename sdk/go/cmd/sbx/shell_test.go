package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tmux drives a real terminal: a tmux server of the test's own (its own socket), killed at
// the end.
type tmux struct {
	t    *testing.T
	bin  string
	sock string
}

func (x *tmux) run(args ...string) string {
	x.t.Helper()
	out, err := exec.Command(x.bin, append([]string{"-S", x.sock}, args...)...).CombinedOutput()
	if err != nil {
		x.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (x *tmux) screen() string { return x.run("capture-pane", "-p", "-t", "sbx") }

// waitScreen waits (10 s at most) until the pane shows want.
func (x *tmux) waitScreen(want string) {
	x.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := x.screen()
		if strings.Contains(s, want) {
			return
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("the terminal never showed %q:\n%s", want, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (x *tmux) paneSize() string {
	return strings.TrimSpace(x.run("display-message", "-p", "-t", "sbx", "#{pane_height} #{pane_width}"))
}

func TestShellInTmux(t *testing.T) {
	bin, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (scripts/setup.sh installs it)")
	}
	dir := t.TempDir()
	x := &tmux{t: t, bin: bin, sock: filepath.Join(dir, "tmux.sock")}
	status := filepath.Join(dir, "status")
	stty := filepath.Join(dir, "stty")
	script := fmt.Sprintf("%s --grpc-port %d --rest-port %d shell; echo $? > %s.tmp; stty -a > %s; mv %s.tmp %s; sleep 30",
		sbxBin, d.GRPCPort, d.RESTPort, status, stty, status, status)
	x.run("new-session", "-d", "-s", "sbx", "-x", "100", "-y", "30", "sh", "-c", script)
	defer exec.Command(bin, "-S", x.sock, "kill-server").Run()

	x.run("send-keys", "-t", "sbx", "echo mark-$((40+2))", "Enter")
	x.waitScreen("mark-42")

	// The remote terminal has the pane's size, and follows it when the window is resized.
	x.run("send-keys", "-t", "sbx", "stty size", "Enter")
	x.waitScreen(x.paneSize())
	x.run("resize-window", "-t", "sbx", "-x", "120", "-y", "40")
	size := x.paneSize()
	if size == "" || strings.HasSuffix(size, " 100") {
		t.Fatalf("the window did not resize: %q", size)
	}
	x.run("send-keys", "-t", "sbx", "clear; stty size", "Enter")
	x.waitScreen(size)

	// Raw mode: Ctrl-C reaches the sandbox's terminal (it interrupts the remote sleep), not
	// sbx, which keeps running.
	x.run("send-keys", "-t", "sbx", `sh -c 'trap "echo got-INT; exit 0" INT; echo ar""med; while :; do sleep 0.1; done'`, "Enter")
	x.waitScreen("armed")
	x.run("send-keys", "-t", "sbx", "C-c")
	x.waitScreen("got-INT")
	x.run("send-keys", "-t", "sbx", "echo after-$((1+1))", "Enter")
	x.waitScreen("after-2")
	if _, err := os.Stat(status); err == nil {
		t.Fatal("sbx ended on Ctrl-C")
	}

	// The shell's exit status is sbx's.
	x.run("send-keys", "-t", "sbx", "exit 7", "Enter")
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(status)
		if err == nil && len(b) > 0 {
			if code, _ := strconv.Atoi(strings.TrimSpace(string(b))); code != 7 {
				t.Fatalf("sbx exited %q, want 7", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sbx did not exit after `exit 7`:\n%s", x.screen())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The local terminal is back in cooked mode.
	modes, err := os.ReadFile(stty)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, f := range strings.Fields(string(modes)) {
		set[f] = true
	}
	for _, m := range []string{"icanon", "echo", "isig"} {
		if !set[m] {
			t.Fatalf("terminal not restored (%q missing):\n%s", m, modes)
		}
	}
}
