package main_test

import (
	"bytes"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestTerminalInTmux(t *testing.T) { interactive(t, "terminal") }

func TestTerminalAttachByPIDInTmux(t *testing.T) {
	r := sbx(t, "", "run", "-t", "--", "sh")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	x, status := inTmux(t, "terminal --pid "+id)
	// An attached terminal takes the window's size.
	x.run("send-keys", "-t", "sbx", "stty size", "Enter")
	x.waitScreen("30 100")
	x.run("send-keys", "-t", "sbx", "kill -USR1 $$", "Enter")
	if code := x.waitStatus(status); code != 128+10 {
		t.Fatalf("sbx exited %d, want %d (128 + SIGUSR1)", code, 128+10)
	}
}

// A dropped sbx leaves the process running and says where to resume; resumed there, it
// shows the rest and nothing twice. Stdin that is not a terminal is forwarded as it comes, and
// its end types the terminal's EOF.
func TestTerminalResumeAfterSbxDies(t *testing.T) {
	r := sbx(t, "", "run", "-t", "--", "sh")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	cmd := exec.Command(sbxBin, "--grpc-port", strconv.Itoa(d.GRPCPort), "--rest-port", strconv.Itoa(d.RESTPort),
		"terminal", "--pid", id, "--offset", "0")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, "echo one-$((3*3))\n")
	var first []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(first, []byte("one-9\r\n")) {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("%v: %q", err, first)
		}
		first = append(first, buf[:n]...)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(out)
	first = append(first, rest...)
	cmd.Wait()
	m := regexp.MustCompile(`sbx terminal --pid (\d+) --offset (\d+) resumes`).FindStringSubmatch(errb.String())
	if cmd.ProcessState.ExitCode() != 1 || m == nil || m[1] != id || m[2] != strconv.Itoa(len(first)) {
		t.Fatalf("exit %d after %d bytes:\n%s", cmd.ProcessState.ExitCode(), len(first), errb.String())
	}
	second := sbx(t, "echo two-$((4*4))\n", "terminal", "--pid", id, "--offset", m[2])
	if second.code != 0 {
		t.Fatalf("%+v", second)
	}
	logs := sbx(t, "", "logs", id)
	if first, second := string(first), second.stdout; first+second != logs.stdout || !strings.Contains(second, "two-16") {
		t.Fatalf("first %q\nsecond %q\nwhole %q", first, second, logs.stdout)
	}
}
