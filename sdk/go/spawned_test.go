package sandboxd_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func TestSpawnListAttachWait(t *testing.T) {
	c := shared.client(t)
	x := ctx(t)
	p, err := c.Spawn(x, sandboxd.Shell("echo out; echo err >&2; exit 3"), sandboxd.Tag("go-basic"))
	if err != nil || p.ID <= 0 || p.Info.Tag != "go-basic" {
		t.Fatalf("%+v %v", p, err)
	}
	ex, err := p.Wait(x)
	if err != nil || *ex != (sandboxd.ExitDetail{Code: 3, Reason: "exited"}) {
		t.Fatalf("%+v %v", ex, err)
	}
	a, err := p.Attach(x)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	got, err := a.Copy(&out, &errb, nil)
	a.Close()
	if err != nil || out.String() != "out\n" || errb.String() != "err\n" || *got != *ex {
		t.Fatalf("%q %q %+v %v", out.String(), errb.String(), got, err)
	}
	list, err := c.ListProcesses(x, "go-basic")
	if err != nil || len(list) != 1 || list[0].ID != p.ID || list[0].State != "exited" || list[0].Stdout.End != 4 {
		t.Fatalf("%+v %v", list, err)
	}
	if err := p.Remove(x); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetProcess(x, p.ID); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatal(err)
	}
}

func TestSpawnOutlivesClientAndReattaches(t *testing.T) {
	x := ctx(t)
	c1 := shared.client(t)
	p, err := c1.Spawn(x, sandboxd.Shell("printf abcdef; read l; printf ghi"), sandboxd.OpenStdin())
	if err != nil {
		t.Fatal(err)
	}
	a := mustAttach(t, p)
	ev, err := a.Next()
	a.Close()
	if err != nil || string(ev.Data) != "abcdef" || ev.Offset != 0 {
		t.Fatalf("%+v %v", ev, err)
	}
	c1.Close()
	c2 := shared.client(t)
	q := c2.Process(p.ID)
	info, err := q.Refresh(x)
	if err != nil || info.State != "running" || info.Stdout.End != 6 {
		t.Fatalf("%+v %v", info, err)
	}
	a = mustAttach(t, q, sandboxd.FromOffsets(3, 0), sandboxd.NoFollow())
	var out bytes.Buffer
	if ex, err := a.Copy(&out, nil, nil); err != nil || ex != nil || out.String() != "def" {
		t.Fatalf("%q %+v %v", out.String(), ex, err)
	}
	if err := q.Write(x, []byte("go\n"), true); err != nil {
		t.Fatal(err)
	}
	a = mustAttach(t, q, sandboxd.FromOffsets(6, 0), sandboxd.OnlyStream(sandboxd.StreamStdout))
	out.Reset()
	if ex, err := a.Copy(&out, nil, nil); err != nil || ex.Reason != "exited" || out.String() != "ghi" {
		t.Fatalf("%q %+v %v", out.String(), ex, err)
	}
}

func TestSpawnTruncationSignalsTimeout(t *testing.T) {
	c := shared.client(t)
	x := ctx(t)
	p := mustSpawn(t, c, sandboxd.Shell("head -c 3000000 /dev/zero"))
	p.Wait(x)
	a := mustAttach(t, p)
	var gaps []sandboxd.AttachEvent
	var n countWriter
	if _, err := a.Copy(&n, nil, func(e sandboxd.AttachEvent) { gaps = append(gaps, e) }); err != nil {
		t.Fatal(err)
	}
	if len(gaps) != 1 || gaps[0].From != 0 || gaps[0].To != uint64(3000000-n.n) || n.n == 0 {
		t.Fatalf("gaps %+v, %d bytes", gaps, n.n)
	}
	tr := mustSpawn(t, c, sandboxd.Shell("setsid sleep 60 & sleep 60 & echo up; wait"))
	a = mustAttach(t, tr)
	if ev, err := a.Next(); err != nil || string(ev.Data) != "up\n" {
		t.Fatal(err)
	}
	a.Close()
	if n, err := tr.Signal(x, syscall.SIGKILL, sandboxd.ScopeTree); err != nil || n < 3 {
		t.Fatalf("%d %v", n, err)
	}
	if ex, err := tr.Wait(x); err != nil || ex.Reason != "killed" || ex.Signal != 9 || ex.Code != -1 {
		t.Fatalf("%+v %v", ex, err)
	}
	u := mustSpawn(t, c, sandboxd.Shell("trap 'exit 9' USR1; echo armed; while :; do sleep 0.05; done"))
	a = mustAttach(t, u)
	a.Next()
	a.Close()
	if _, err := u.Signal(x, syscall.SIGUSR1, sandboxd.ScopeProcess); err != nil {
		t.Fatal(err)
	}
	if ex, err := u.Wait(x); err != nil || ex.Code != 9 || ex.Reason != "exited" {
		t.Fatalf("%+v %v", ex, err)
	}
	to := mustSpawn(t, c, []string{"sleep", "60"}, sandboxd.Timeout(300*time.Millisecond), sandboxd.Grace(200*time.Millisecond))
	if ex, err := to.Wait(x); err != nil || ex.Reason != "timed_out" {
		t.Fatalf("%+v %v", ex, err)
	}
	pt := mustSpawn(t, c, sandboxd.Shell("stty size; read l; stty size"), sandboxd.PTY(24, 80))
	a = mustAttach(t, pt)
	var seen []byte
	for !bytes.Contains(seen, []byte("24 80")) {
		ev, err := a.Next()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Data...)
	}
	pt.Resize(x, 30, 100)
	pt.Write(x, []byte("\n"), false)
	var rest bytes.Buffer
	if _, err := a.Copy(&rest, nil, nil); err != nil || !strings.Contains(rest.String(), "30 100") {
		t.Fatalf("%q %v", rest.String(), err)
	}
}

func TestRunProcess(t *testing.T) {
	c := shared.client(t)
	x := ctx(t)
	r, err := c.RunProcess(x, sandboxd.Shell("echo hi; echo e >&2; exit 2"))
	if err != nil || r.ExitCode != 2 || string(r.Stdout) != "hi\n" || r.Exit.Reason != "exited" {
		t.Fatalf("%+v %v", r, err)
	}
	r = mustRunProcess(t, c, []string{"cat"}, sandboxd.Stdin(strings.NewReader("in")))
	if string(r.Stdout) != "in" {
		t.Fatalf("%+v", r)
	}
	r = mustRunProcess(t, c, []string{"seq", "1", "100000"}, sandboxd.MaxOutput(10))
	if !r.StdoutTruncated || string(r.Stdout) != "\n99999\n100000\n"[4:] || r.StdoutTotal != 588895 ||
		r.StdoutDropped != 588895-10 {
		t.Fatalf("%q %d %d", r.Stdout, r.StdoutTotal, r.StdoutDropped)
	}
	r = mustRunProcess(t, c, sandboxd.Shell("ulimit -n"), sandboxd.Rlimit("nofile", 77, 77))
	if string(r.Stdout) != "77\n" {
		t.Fatalf("%q", r.Stdout)
	}
	if os.Geteuid() == 0 {
		r = mustRunProcess(t, c, sandboxd.Shell("id -u; id -g"), sandboxd.User(65534, 65534))
		if string(r.Stdout) != "65534\n65534\n" {
			t.Fatalf("%q", r.Stdout)
		}
	}
	r = mustRunProcess(t, c, []string{"sleep", "30"}, sandboxd.Timeout(300*time.Millisecond), sandboxd.Grace(100*time.Millisecond))
	if !r.TimedOut {
		t.Fatalf("%+v", r)
	}
	if _, err := c.Run(x, []string{"true"}, sandboxd.Tag("x")); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("process.v1 Run must refuse sandboxd.v1 options: %v", err)
	}
	if _, err := c.Spawn(x, []string{"/no/such"}); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := c.RunProcess(x, []string{"cat"}, sandboxd.Stdin(io.LimitReader(zeros{}, 4<<20))); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatal(err)
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

func mustSpawn(t *testing.T, c *sandboxd.Client, cmd []string, opts ...sandboxd.ProcOption) *sandboxd.Spawned {
	t.Helper()
	p, err := c.Spawn(ctx(t), cmd, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustAttach(t *testing.T, p *sandboxd.Spawned, opts ...sandboxd.AttachOption) *sandboxd.Attachment {
	t.Helper()
	a, err := p.Attach(ctx(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustRunProcess(t *testing.T, c *sandboxd.Client, cmd []string, opts ...sandboxd.ProcOption) *sandboxd.Result {
	t.Helper()
	r, err := c.RunProcess(ctx(t), cmd, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// seccompFilters is the number of seccomp filters the command's process runs under.
const seccompProbe = "awk '/^Seccomp_filters:/ {print $2}' /proc/self/status"

func filtersOf(t *testing.T, r *sandboxd.Result) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
	if err != nil {
		t.Fatalf("%q %q: %v", r.Stdout, r.Stderr, err)
	}
	return n
}

func TestSeccompProfiles(t *testing.T) {
	c := shared.client(t)
	x := ctx(t)
	off := filtersOf(t, mustRunProcess(t, c, sandboxd.Shell(seccompProbe), sandboxd.Seccomp("off")))
	// The daemon runs with --seccomp=default: its profile is one filter more, asked or not.
	if n := filtersOf(t, mustRunProcess(t, c, sandboxd.Shell(seccompProbe))); n != off+1 {
		t.Fatalf("daemon's profile: %d filters, off: %d", n, off)
	}
	if n := filtersOf(t, mustRunProcess(t, c, sandboxd.Shell(seccompProbe), sandboxd.Seccomp("default"))); n != off+1 {
		t.Fatalf("default: %d filters, off: %d", n, off)
	}
	p := mustSpawn(t, c, sandboxd.Shell(seccompProbe), sandboxd.Seccomp("off"))
	if _, err := p.Wait(x); err != nil {
		t.Fatal(err)
	}
	a := mustAttach(t, p)
	var out bytes.Buffer
	_, err := a.Copy(&out, io.Discard, nil)
	a.Close()
	if err != nil || strings.TrimSpace(out.String()) != strconv.Itoa(off) {
		t.Fatalf("spawned with off: %q %v", out.String(), err)
	}
	if _, err := c.RunProcess(x, sandboxd.Shell("true"), sandboxd.Seccomp("strict")); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("an unknown profile: %v", err)
	}
	if _, err := c.Run(x, []string{"true"}, sandboxd.Seccomp("off")); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("process.v1 Run must refuse Seccomp: %v", err)
	}
}
