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
	"github.com/sandboxd/sandboxd/sdk/go/internal/testdaemon"
)

func TestRun(t *testing.T) {
	c := shared.client(t)
	r, err := c.Run(ctx(t), []string{"sh", "-c", "echo out; echo err >&2; exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 7 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || r.Success() || r.ProcessID <= 0 {
		t.Fatalf("got %+v", r)
	}
}

func TestRunEnvDirStdin(t *testing.T) {
	c := shared.client(t)
	a := area(t)
	r, err := c.Run(ctx(t), sandboxd.Shell("echo $SDK_X; pwd; tr a-z A-Z"),
		sandboxd.Env(map[string]string{"SDK_X": "a b=c"}), sandboxd.Dir(a),
		sandboxd.Stdin(strings.NewReader("from stdin")))
	if err != nil {
		t.Fatal(err)
	}
	want := "a b=c\n" + filepath.Join(shared.Root, a) + "\nFROM STDIN"
	if string(r.Stdout) != want || r.ExitCode != 0 {
		t.Fatalf("got %q, want %q", r.Stdout, want)
	}
}

func TestRunMaxOutputAndTimeout(t *testing.T) {
	c := shared.client(t)
	r, err := c.Run(ctx(t), sandboxd.Shell("head -c 300000 /dev/zero; echo e >&2"), sandboxd.MaxOutput(1000))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout) != 1000 || !r.StdoutTruncated || string(r.Stderr) != "e\n" || r.StderrTruncated {
		t.Fatalf("got %d bytes, %+v", len(r.Stdout), r)
	}
	r, err = c.Run(ctx(t), sandboxd.Shell("echo started; exec sleep 60"), sandboxd.Timeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// What it printed before the kill is kept (if it got that far under load).
	if !r.TimedOut || r.ExitCode != -1 || (string(r.Stdout) != "started\n" && len(r.Stdout) != 0) {
		t.Fatalf("got %+v", r)
	}
}

func TestExecute(t *testing.T) {
	c := shared.client(t)
	r, err := c.Execute(ctx(t), []string{"sh", "-c", "echo x; echo y >&2; exit 2"})
	if err != nil || r.ExitCode != 2 || string(r.Stdout) != "x\n" || string(r.Stderr) != "y\n" {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func TestExecuteTellsWhatTheDaemonDropped(t *testing.T) {
	// The daemon keeps 1 MiB per stream here; what it dropped comes in the call's trailers.
	d, err := startDaemon(os.Getenv("SANDBOXD_BIN"), t.TempDir(), "--max-output-bytes", "1048576")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.stop(); err != nil {
			t.Error(err)
		}
	}()
	c := d.client(t)
	r, err := c.Execute(ctx(t), sandboxd.Shell("head -c 3000000 /dev/zero; head -c 1048580 /dev/zero >&2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout) != 1<<20 || len(r.Stderr) != 1<<20 {
		t.Fatalf("kept %d and %d bytes", len(r.Stdout), len(r.Stderr))
	}
	if r.StdoutDropped != 3000000-1<<20 || r.StderrDropped != 4 || !r.StdoutTruncated || !r.StderrTruncated {
		t.Fatalf("dropped %d and %d, truncated %v and %v", r.StdoutDropped, r.StderrDropped,
			r.StdoutTruncated, r.StderrTruncated)
	}
	r, err = c.Execute(ctx(t), sandboxd.Shell("head -c 100000 /dev/zero"))
	if err != nil || len(r.Stdout) != 100000 || r.StdoutDropped != 0 || r.StderrDropped != 0 ||
		r.StdoutTruncated || r.StderrTruncated {
		t.Fatalf("under the cap: %d bytes, dropped %d and %d, %v", len(r.Stdout), r.StdoutDropped,
			r.StderrDropped, err)
	}
}

func TestStartStreamsBeforeExit(t *testing.T) {
	c := shared.client(t)
	p, err := c.Start(ctx(t), sandboxd.Shell("echo first; read l; echo got $l; echo err >&2"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ev, err := p.Next()
	if err != nil || ev.Stream != sandboxd.StreamStdout || string(ev.Data) != "first\n" {
		t.Fatalf("got %+v %v", ev, err)
	}
	if p.ExitStatus() != nil {
		t.Fatal("exited before its input")
	}
	if _, err := io.WriteString(p, "second\n"); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	for {
		ev, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == sandboxd.StreamStderr {
			errb.Write(ev.Data)
		} else {
			out.Write(ev.Data)
		}
	}
	if out.String() != "got second\n" || errb.String() != "err\n" || p.ExitStatus().Code != 0 {
		t.Fatalf("got %q %q %+v", out.String(), errb.String(), p.ExitStatus())
	}
}

func TestStartLongOutputToWriters(t *testing.T) {
	c := shared.client(t)
	var out countWriter
	p, err := c.Start(ctx(t), sandboxd.Shell("head -c 67108864 /dev/zero"), sandboxd.Stdout(&out))
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st.Code != 0 || out.n != 64<<20 || out.nonzero {
		t.Fatalf("got %d bytes, %+v, %v", out.n, st, err)
	}
	var seq bytes.Buffer
	p, err = c.Start(ctx(t), []string{"seq", "1", "20000"}, sandboxd.Stdout(&seq))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(seq.String())
	if len(f) != 20000 || f[0] != "1" || f[19999] != "20000" {
		t.Fatalf("seq out of order or short: %d", len(f))
	}
}

type countWriter struct {
	n       int
	nonzero bool
}

func (w *countWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	for _, x := range b {
		if x != 0 {
			w.nonzero = true
		}
	}
	return len(b), nil
}

func TestStdinInteractive(t *testing.T) {
	c := shared.client(t)
	p, err := c.Start(ctx(t), []string{"cat"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 20; i++ {
		msg := []byte(strings.Repeat("x", i) + "\n")
		if _, err := p.Write(msg); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for len(got) < len(msg) {
			ev, err := p.Next()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.Data...)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("echo %q, want %q", got, msg)
		}
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("%+v %v", st, err)
	}
}

func TestPTYAndResize(t *testing.T) {
	c := shared.client(t)
	p, err := c.Start(ctx(t), sandboxd.Shell("tty; stty size; read x; stty size; echo e >&2"), sandboxd.PTY(24, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out []byte
	for !bytes.Contains(out, []byte("24 80")) {
		ev, err := p.Next()
		if err != nil {
			t.Fatalf("%v after %q", err, out)
		}
		out = append(out, ev.Data...)
	}
	if !bytes.Contains(out, []byte("/dev/pts/")) {
		t.Fatalf("no tty: %q", out)
	}
	if err := p.Resize(ctx(t), 40, 132); err != nil {
		t.Fatal(err)
	}
	p.Write([]byte("\n"))
	var rest []byte
	for {
		ev, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream != sandboxd.StreamStdout {
			t.Fatal("a PTY has only stdout")
		}
		rest = append(rest, ev.Data...)
	}
	if !bytes.Contains(rest, []byte("40 132")) || !bytes.Contains(rest, []byte("e")) {
		t.Fatalf("got %q", rest)
	}
}

func TestSignals(t *testing.T) {
	c := shared.client(t)
	p, err := c.Start(ctx(t), sandboxd.Shell("exec sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx(t), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(); err != nil || st.Code != -1 {
		t.Fatalf("%+v %v", st, err)
	}
	var out bytes.Buffer
	p, err = c.Start(ctx(t), sandboxd.Shell("trap 'echo caught; exit 5' INT; echo armed; while :; do sleep 0.05; done"), sandboxd.Stdout(&out))
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := p.Next(); err != nil || string(ev.Data) != "armed\n" {
		t.Fatalf("%q %v", ev.Data, err)
	}
	p.Signal(ctx(t), syscall.SIGINT)
	if st, err := p.Wait(); err != nil || st.Code != 5 || out.String() != "caught\n" {
		t.Fatalf("%+v %v %q", st, err, out.String())
	}
	p, err = c.Start(ctx(t), sandboxd.Shell("trap '' TERM; exec sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	p.Kill(ctx(t))
	if st, err := p.Wait(); err != nil || st.Code != -1 {
		t.Fatalf("%+v %v", st, err)
	}
}

func TestCloseKillsProcess(t *testing.T) {
	c := shared.client(t)
	// The shell tells its OS pid (same machine), then would run for a minute.
	p, err := c.Start(ctx(t), sandboxd.Shell("echo $$; exec sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := p.Next()
	if err != nil {
		t.Fatal(err)
	}
	proc := "/proc/" + strings.TrimSpace(string(ev.Data))
	p.Close()
	// The stream went away: the daemon kills the group (bounded wait, polled).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile(proc + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still alive after Close", proc)
		}
	}
}

func TestProcessErrorsAreTyped(t *testing.T) {
	c := shared.client(t)
	_, err := c.Run(ctx(t), []string{"/no/such/binary"})
	var se *sandboxd.Error
	if !errors.Is(err, sandboxd.ErrNotFound) || !errors.As(err, &se) || se.Code != "NOT_FOUND" {
		t.Fatalf("got %v", err)
	}
	if _, err := c.Run(ctx(t), []string{"true"}, sandboxd.Dir("no-such-dir")); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("got %v", err)
	}
	if _, err := c.Run(ctx(t), nil); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("got %v", err)
	}
	p, err := c.Start(ctx(t), sandboxd.Shell("read x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(ctx(t), 1, 1); !errors.Is(err, sandboxd.ErrFailedPrecondition) {
		t.Fatalf("got %v", err)
	}
	if err := p.Signal(ctx(t), syscall.SIGUSR1); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("got %v", err)
	}
	p.CloseStdin()
	p.Wait()
	if _, err := p.Write([]byte("late")); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("got %v", err)
	}
	if err := p.Kill(ctx(t)); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("got %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	c, err := sandboxd.New("127.0.0.1", sandboxd.WithGRPCPort(1), sandboxd.WithRESTPort(1), sandboxd.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Run(ctx(t), []string{"true"}); !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
	if _, err := c.Stat(ctx(t), "x"); !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
}

func TestUnixSocketAndToken(t *testing.T) {
	c := shared.client(t, sandboxd.WithUnixSocket(shared.Socket), sandboxd.WithToken("harmless"))
	r, err := c.Run(ctx(t), []string{"echo", "via-unix"})
	if err != nil || string(r.Stdout) != "via-unix\n" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestRunLargeStdinThroughAFilter(t *testing.T) {
	c := shared.client(t)
	data := bytes.Repeat(testdaemon.RandBytes(t, 10<<20), 2)
	r, err := c.Run(ctx(t), []string{"cat"}, sandboxd.Stdin(bytes.NewReader(data)), sandboxd.MaxOutput(len(data)))
	if err != nil || r.ExitCode != 0 || !bytes.Equal(r.Stdout, data) {
		t.Fatalf("%d bytes back, %v", len(r.Stdout), err)
	}
}
