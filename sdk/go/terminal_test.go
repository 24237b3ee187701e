package sandboxd_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// bound closes term if a test's reads have not finished within 20 s: a Read then fails.
func bound(term *sandboxd.Terminal) func() bool {
	return time.AfterFunc(20*time.Second, func() { term.Close() }).Stop
}

func readUntil(t *testing.T, term *sandboxd.Terminal, want string) []byte {
	t.Helper()
	defer bound(term)()
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte(want)) {
		n, err := term.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("reading until %q: %v (read %q)", want, err, got)
		}
	}
	return got
}

// prompt reads until a login shell shows its prompt: what is typed before a shell sets up its
// line editor may be thrown away, so a test types after it, as a person would.
func prompt(t *testing.T, term *sandboxd.Terminal) []byte {
	t.Helper()
	defer bound(term)()
	var got []byte
	buf := make([]byte, 4096)
	for s := strings.TrimSpace(string(got)); !strings.HasSuffix(s, "$") && !strings.HasSuffix(s, "#"); s = strings.TrimSpace(string(got)) {
		n, err := term.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("no prompt: %v (read %q)", err, got)
		}
	}
	return got
}

func readToExit(t *testing.T, term *sandboxd.Terminal) []byte {
	t.Helper()
	defer bound(term)()
	got, err := io.ReadAll(term)
	if err != nil {
		t.Fatalf("reading to the exit: %v (read %q)", err, got)
	}
	return got
}

// wholeOutput is all the process wrote, as sandboxd.v1.Processes/Attach gives it from 0.
func wholeOutput(t *testing.T, c *sandboxd.Client, id int32) []byte {
	t.Helper()
	var out bytes.Buffer
	if _, err := mustAttach(t, c.Process(id)).Copy(&out, nil, func(ev sandboxd.AttachEvent) {
		t.Fatalf("output dropped: %+v", ev)
	}); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestTerminalNewShellOutputInputExit(t *testing.T) {
	c := shared.client(t)
	term, err := c.Terminal(ctx(t), sandboxd.TerminalOptions{Cols: 91, Rows: 31})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if term.ID() <= 0 || term.Offset() != 0 || term.Exit() != nil {
		t.Fatalf("id %d offset %d exit %v", term.ID(), term.Offset(), term.Exit())
	}
	out := prompt(t, term)
	if _, err := term.Write([]byte("echo T=$TERM; stty size; exit 4\n")); err != nil {
		t.Fatal(err)
	}
	out = append(out, readToExit(t, term)...)
	if !strings.Contains(string(out), "T=xterm-256color") || !strings.Contains(string(out), "31 91") {
		t.Fatalf("%q", out)
	}
	select {
	case <-term.Done():
	default:
		t.Fatal("Done not closed after the exit")
	}
	if ex := term.Exit(); *ex != (sandboxd.ExitDetail{Code: 4, Reason: "exited"}) {
		t.Fatalf("%+v", ex)
	}
	info, err := c.GetProcess(ctx(t), term.ID())
	if err != nil || term.Offset() != uint64(len(out)) || info.Stdout.End != term.Offset() {
		t.Fatalf("offset %d, read %d, written %d, %v", term.Offset(), len(out), info.Stdout.End, err)
	}
	if !bytes.Equal(out, wholeOutput(t, c, term.ID())) || len(term.Truncated()) != 0 {
		t.Fatal("the terminal's bytes are not the process's output")
	}
}

func TestTerminalAttachResizeReconnect(t *testing.T) {
	c := shared.client(t)
	x := ctx(t)
	p := mustSpawn(t, c, []string{"sh"}, sandboxd.PTY(24, 80), sandboxd.OpenStdin())
	zero := uint64(0)
	term, err := c.Terminal(x, sandboxd.TerminalOptions{PID: p.ID, Offset: &zero})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	term.Write([]byte("stty size\n"))
	seen := readUntil(t, term, "24 80")
	if err := term.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("stty size\n"))
	seen = append(seen, readUntil(t, term, "30 100")...)
	// Output received but not read when it reconnects comes again from the offset, once.
	p.Write(x, []byte("echo two-$((4*4))\n"), false)
	for deadline := time.Now().Add(20 * time.Second); !bytes.Contains(ringNow(t, p), []byte("two-16\r\n")); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no two-16 in the ring")
		}
	}
	if err := term.Reconnect(x); err != nil || term.Offset() != uint64(len(seen)) {
		t.Fatalf("offset %d after reading %d: %v", term.Offset(), len(seen), err)
	}
	seen = append(seen, readUntil(t, term, "two-16\r\n")...)
	term.Write([]byte("exit 3\n"))
	seen = append(seen, readToExit(t, term)...)
	if ex := term.Exit(); ex == nil || ex.Code != 3 {
		t.Fatalf("%+v", ex)
	}
	if whole := wholeOutput(t, c, p.ID); !bytes.Equal(seen, whole) {
		t.Fatalf("read %q\nwrote %q", seen, whole)
	}
	if bytes.Count(seen, []byte("two-16\r\n")) != 1 {
		t.Fatalf("%q", seen)
	}
}

// ringNow is what the process's ring holds now.
func ringNow(t *testing.T, p *sandboxd.Spawned) []byte {
	var b bytes.Buffer
	if _, err := mustAttach(t, p, sandboxd.NoFollow()).Copy(&b, nil, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestTerminalRefusalsSignalAndClose(t *testing.T) {
	c := shared.client(t)
	x := ctx(t)
	plain := mustSpawn(t, c, []string{"sleep", "60"})
	defer plain.Signal(x, syscall.SIGKILL, sandboxd.ScopeTree)
	for _, tc := range []struct {
		o    sandboxd.TerminalOptions
		want error
	}{
		{sandboxd.TerminalOptions{PID: plain.ID}, sandboxd.ErrFailedPrecondition},
		{sandboxd.TerminalOptions{PID: 999999}, sandboxd.ErrNotFound},
		{sandboxd.TerminalOptions{PID: plain.ID, Command: "x"}, sandboxd.ErrInvalidArgument},
		{sandboxd.TerminalOptions{Cols: 70000}, sandboxd.ErrInvalidArgument},
	} {
		if _, err := c.Terminal(x, tc.o); !errors.Is(err, tc.want) {
			t.Fatalf("%+v: %v, want %v", tc.o, err, tc.want)
		}
	}
	// Closing leaves the process running; its exit by a signal comes with the detail.
	term, err := c.Terminal(x, sandboxd.TerminalOptions{Command: "echo up; exec sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, term, "up\r\n")
	term.Close()
	if _, err := term.Write([]byte("x")); !errors.Is(err, sandboxd.ErrCanceled) {
		t.Fatalf("write after close: %v", err)
	}
	if info, err := c.GetProcess(x, term.ID()); err != nil || info.State != "running" || info.Tag != "terminal" {
		t.Fatalf("%+v %v", info, err)
	}
	again, err := c.Terminal(x, sandboxd.TerminalOptions{PID: term.ID()})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Offset() != 0 || string(readUntil(t, again, "up\r\n")) != "up\r\n" {
		t.Fatal("the default replay lost the first line")
	}
	c.Process(term.ID()).Signal(x, syscall.SIGKILL, sandboxd.ScopeGroup)
	if rest := readToExit(t, again); len(rest) != 0 {
		t.Fatalf("%q", rest)
	}
	if ex := again.Exit(); *ex != (sandboxd.ExitDetail{Code: -1, Signal: 9, Reason: "killed"}) {
		t.Fatalf("%+v", ex)
	}
}

func TestTerminalToken(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	os.WriteFile(tf, []byte("term-token\n"), 0o600)
	d, err := startDaemon(os.Getenv("SANDBOXD_BIN"), dir, "--token-file", tf)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	term, err := d.client(t, sandboxd.WithToken("term-token")).Terminal(ctx(t), sandboxd.TerminalOptions{Command: "echo authed"})
	if err != nil {
		t.Fatal(err)
	}
	if out := readToExit(t, term); string(out) != "authed\r\n" {
		t.Fatalf("%q", out)
	}
	term.Close()
	for _, tok := range []string{"wrong", ""} {
		_, err := d.client(t, sandboxd.WithToken(tok)).Terminal(ctx(t), sandboxd.TerminalOptions{Command: "echo no"})
		if !errors.Is(err, sandboxd.ErrUnauthenticated) {
			t.Fatalf("token %q: %v", tok, err)
		}
	}
}

func TestTerminalOutputGoneFromTheRingIsSaid(t *testing.T) {
	dir := t.TempDir()
	d, err := startDaemon(os.Getenv("SANDBOXD_BIN"), dir, "--output-ring-bytes", "4096")
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	c := d.client(t)
	x := ctx(t)
	p := mustSpawn(t, c, sandboxd.Shell(`head -c 20000 /dev/zero | tr '\0' x; echo; echo end`), sandboxd.PTY(24, 80))
	if _, err := p.Wait(x); err != nil {
		t.Fatal(err)
	}
	zero := uint64(0)
	term, err := c.Terminal(x, sandboxd.TerminalOptions{PID: p.ID, Offset: &zero})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	out := readToExit(t, term)
	info, err := c.GetProcess(x, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	gaps := term.Truncated()
	if len(gaps) != 1 || gaps[0].From != 0 || gaps[0].To != info.Stdout.Start || gaps[0].To < 15000 {
		t.Fatalf("gaps %+v, ring from %d", gaps, info.Stdout.Start)
	}
	if !bytes.HasSuffix(out, []byte("end\r\n")) || gaps[0].To+uint64(len(out)) != term.Offset() || term.Offset() != info.Stdout.End {
		t.Fatalf("%d bytes after the gap, offset %d, written %d", len(out), term.Offset(), info.Stdout.End)
	}
}
