package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// waitPrompt waits (10 s at most) until the pane's last line is a shell's prompt: what is
// typed before a shell sets up its line editor may be thrown away.
func (x *tmux) waitPrompt() {
	x.t.Helper()
	rx := regexp.MustCompile(`[#$]\s*$`)
	deadline := time.Now().Add(10 * time.Second)
	for s := x.screen(); !rx.MatchString(strings.TrimRight(s, "\n ")); s = x.screen() {
		if time.Now().After(deadline) {
			x.t.Fatalf("no prompt:\n%s", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inTmux starts `sbx ARGS` in a tmux pane of 100 x 30 (a tmux server of the test's own, its
// own socket, killed at the end); the returned path gets sbx's exit status once it ends, and
// the local terminal's modes then go beside it (+".stty").
func inTmux(t *testing.T, args string) (*tmux, string) {
	bin, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (scripts/setup.sh installs it)")
	}
	dir := t.TempDir()
	x := &tmux{t: t, bin: bin, sock: filepath.Join(dir, "tmux.sock")}
	status := filepath.Join(dir, "status")
	script := fmt.Sprintf("%s --grpc-port %d --rest-port %d %s; echo $? > %s.tmp; stty -a > %s.stty; mv %s.tmp %s; sleep 30",
		sbxBin, d.GRPCPort, d.RESTPort, args, status, status, status, status)
	x.run("new-session", "-d", "-s", "sbx", "-x", "100", "-y", "30", "sh", "-c", script)
	t.Cleanup(func() { exec.Command(bin, "-S", x.sock, "kill-server").Run() })
	return x, status
}

// waitStatus waits (10 s at most) for sbx's exit status.
func (x *tmux) waitStatus(status string) int {
	x.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(status)
		if err == nil && len(b) > 0 {
			code, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return code
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("sbx did not exit:\n%s", x.screen())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestShellInTmux(t *testing.T) { interactive(t, "shell") }

// interactive drives `sbx ARGS`, a shell on the local terminal, as a person would.
func interactive(t *testing.T, args string) {
	x, status := inTmux(t, args)
	x.waitPrompt()
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
	if code := x.waitStatus(status); code != 7 {
		t.Fatalf("sbx exited %d, want 7", code)
	}
	// The local terminal is back in cooked mode.
	modes, err := os.ReadFile(status + ".stty")
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
