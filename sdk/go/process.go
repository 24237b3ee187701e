package sandboxd

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	xpb "github.com/sandboxd/sandboxd/sdk/go/internal/processespb"
	pb "github.com/sandboxd/sandboxd/sdk/go/internal/processpb"
)

// ExitStatus tells how a process ended. Code is -1 when a signal killed it (all that
// process.v1 tells today).
type ExitStatus struct {
	Code int
}

// Success reports whether the process exited 0.
func (e ExitStatus) Success() bool { return e.Code == 0 }

// Stream names an output stream.
type Stream int

const (
	StreamStdout Stream = 1
	StreamStderr Stream = 2
)

func (s Stream) String() string {
	if s == StreamStderr {
		return "stderr"
	}
	return "stdout"
}

// Event is a chunk of output. A process with a PTY has only Stdout.
type Event struct {
	Stream Stream
	Data   []byte
}

// Result is what Run captured.
type Result struct {
	ExitCode        int
	Stdout, Stderr  []byte
	StdoutTruncated bool // output beyond MaxOutput was dropped
	StderrTruncated bool
	TimedOut        bool // the Timeout passed and the process was killed
	ProcessID       int32
	// Only from RunProcess: how it ended, and all the bytes it wrote per stream.
	Exit                     *ExitDetail
	StdoutTotal, StderrTotal uint64
	// From Execute and RunProcess: the bytes of each stream the daemon dropped (past its
	// --max-output-bytes or its output memory bound; Execute tells them in its call's
	// trailing metadata). The matching *Truncated is set when one is not zero.
	StdoutDropped, StderrDropped int64
}

// Execute's trailing metadata: the bytes the daemon dropped past its caps, per stream.
const (
	stdoutTruncatedKey = "sandboxd-stdout-truncated"
	stderrTruncatedKey = "sandboxd-stderr-truncated"
)

// droppedBytes reads one of those entries (0 when absent or not a number).
func droppedBytes(md metadata.MD, key string) int64 {
	v := md.Get(key)
	if len(v) != 1 {
		return 0
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Success reports whether the command exited 0 in time.
func (r *Result) Success() bool { return r.ExitCode == 0 && !r.TimedOut }

type procConfig struct {
	env            map[string]string
	dir            *string
	pty            *pb.PTY
	stdin          io.Reader
	stdout, stderr io.Writer
	timeout        time.Duration
	maxOutput      int
	ext            *xpb.ProcessSpec // options only sandboxd.v1 carries (Spawn, RunProcess)
}

// ProcOption configures Run, Start and Execute.
type ProcOption func(*procConfig)

// Env adds variables to the daemon's environment for the process.
func Env(env map[string]string) ProcOption { return func(p *procConfig) { p.env = env } }

// Dir sets the working directory (relative to the sandbox root, confined to it).
func Dir(dir string) ProcOption { return func(p *procConfig) { p.dir = &dir } }

// PTY gives the process a terminal of rows x cols (stderr merges into stdout).
func PTY(rows, cols uint32) ProcOption {
	return func(p *procConfig) { p.pty = &pb.PTY{Rows: rows, Cols: cols} }
}

// Stdin copies r to the process's stdin, then closes it (Run and Start).
func Stdin(r io.Reader) ProcOption { return func(p *procConfig) { p.stdin = r } }

// Stdout sends the process's stdout to w as Process.Wait reads it (Start).
func Stdout(w io.Writer) ProcOption { return func(p *procConfig) { p.stdout = w } }

// Stderr sends the process's stderr to w as Process.Wait reads it (Start).
func Stderr(w io.Writer) ProcOption { return func(p *procConfig) { p.stderr = w } }

// Timeout kills the process (SIGKILL to its group) after d (Run and Start).
func Timeout(d time.Duration) ProcOption { return func(p *procConfig) { p.timeout = d } }

// MaxOutput caps what Run keeps per stream (default 16 MiB); the rest is dropped and flagged.
func MaxOutput(n int) ProcOption { return func(p *procConfig) { p.maxOutput = n } }

func buildConfig(cmd []string, opts []ProcOption) (*pb.ProcessConfig, *procConfig, error) {
	if len(cmd) == 0 {
		return nil, nil, &Error{Code: "INVALID_ARGUMENT", Message: "empty command"}
	}
	pc := &procConfig{maxOutput: 16 << 20}
	for _, o := range opts {
		o(pc)
	}
	if pc.maxOutput < 0 {
		return nil, nil, &Error{Code: "INVALID_ARGUMENT", Message: "negative MaxOutput"}
	}
	if pc.ext != nil {
		return nil, nil, &Error{Code: "INVALID_ARGUMENT", Message: "Tag, OpenStdin, Grace, User, Rlimit, " +
			"MemoryLimit, PidsLimit and Seccomp need Spawn or RunProcess (sandboxd.v1)"}
	}
	return &pb.ProcessConfig{Command: cmd, EnvVars: pc.env, Cwd: pc.dir}, pc, nil
}

// Shell is a command that runs line through /bin/sh -c.
func Shell(line string) []string { return []string{"/bin/sh", "-c", line} }

// Execute runs cmd with one unary call: the daemon captures the output (its
// --max-output-bytes applies; what it dropped is in Result.StdoutDropped and StderrDropped)
// and stdin is empty. ctx bounds the call (the client's timeout
// when it has no deadline).
func (c *Client) Execute(ctx context.Context, cmd []string, opts ...ProcOption) (*Result, error) {
	cfg, _, err := buildConfig(cmd, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.rpcCtx(ctx, true)
	defer cancel()
	var trailer metadata.MD
	r, err := c.proc.Execute(ctx, &pb.ExecuteRequest{Config: cfg}, grpc.Trailer(&trailer))
	if err != nil {
		return nil, grpcError(err)
	}
	res := &Result{ExitCode: int(r.ExitCode), Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutDropped: droppedBytes(trailer, stdoutTruncatedKey),
		StderrDropped: droppedBytes(trailer, stderrTruncatedKey)}
	res.StdoutTruncated = res.StdoutDropped > 0
	res.StderrTruncated = res.StderrDropped > 0
	return res, nil
}

// Run runs cmd to completion over a Start stream and captures its output, at most MaxOutput
// bytes per stream. With Timeout, the process is killed when it passes and Result.TimedOut is
// set. A non-zero exit is not an error: look at Result.ExitCode.
func (c *Client) Run(ctx context.Context, cmd []string, opts ...ProcOption) (*Result, error) {
	p, err := c.Start(ctx, cmd, opts...)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	res := &Result{ProcessID: p.ID()}
	keep := func(buf *[]byte, trunc *bool, data []byte) {
		room := p.cfg.maxOutput - len(*buf)
		if len(data) > room {
			*trunc = true
			data = data[:max(room, 0)]
		}
		*buf = append(*buf, data...)
	}
	for {
		ev, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if ev.Stream == StreamStderr {
			keep(&res.Stderr, &res.StderrTruncated, ev.Data)
		} else {
			keep(&res.Stdout, &res.StdoutTruncated, ev.Data)
		}
	}
	st, err := p.Wait()
	if err != nil {
		return nil, err
	}
	res.ExitCode, res.TimedOut = st.Code, p.timedOut()
	return res, nil
}

// Process is a started process. Read its output with Next (or let Wait copy it to the
// Stdout/Stderr writers), write its stdin with Write and CloseStdin, signal it, resize its
// terminal. Cancelling the ctx given to Start, or Close, ends the stream: the daemon then
// kills the process's group.
type Process struct {
	c      *Client
	cfg    *procConfig
	stream pb.ProcessService_StartClient
	cancel context.CancelFunc
	id     int32

	mu       sync.Mutex
	exit     *ExitStatus
	err      error
	killed   bool
	timer    *time.Timer
	stdinErr error
	stdinWG  sync.WaitGroup
}

// Start starts cmd and returns once the daemon has started it. ctx governs the whole life
// of the stream: when it ends, so does the process.
func (c *Client) Start(ctx context.Context, cmd []string, opts ...ProcOption) (*Process, error) {
	cfg, pc, err := buildConfig(cmd, opts)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	mctx, _ := c.rpcCtx(sctx, false)
	stream, err := c.proc.Start(mctx, &pb.StartRequest{Config: cfg, Pty: pc.pty})
	if err != nil {
		cancel()
		return nil, grpcError(err)
	}
	// The first message is the init event; a daemon that never sends it must not hang us.
	slow := time.AfterFunc(c.timeout, cancel)
	first, err := stream.Recv()
	stopped := slow.Stop()
	if err != nil {
		cancel()
		if !stopped && ctx.Err() == nil {
			return nil, &Error{Code: "DEADLINE_EXCEEDED", Message: "the process did not start in time"}
		}
		return nil, grpcError(err)
	}
	init := first.GetInit()
	if init == nil {
		cancel()
		return nil, &Error{Code: "INTERNAL", Message: "the stream did not begin with an init event"}
	}
	p := &Process{c: c, cfg: pc, stream: stream, cancel: cancel, id: init.ProcessId}
	if pc.timeout > 0 {
		p.timer = time.AfterFunc(pc.timeout, p.expire)
	}
	if pc.stdin != nil {
		p.stdinWG.Add(1)
		go p.copyStdin(sctx, pc.stdin)
	}
	return p, nil
}

// ID is the daemon's process id (virtual, not an OS pid).
func (p *Process) ID() int32 { return p.id }

func (p *Process) expire() {
	p.mu.Lock()
	done := p.exit != nil
	if !done {
		p.killed = true
	}
	p.mu.Unlock()
	if !done {
		ctx, cancel := context.WithTimeout(context.Background(), p.c.timeout)
		defer cancel()
		_ = p.Signal(ctx, syscall.SIGKILL)
	}
}

func (p *Process) timedOut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

func (p *Process) copyStdin(ctx context.Context, r io.Reader) {
	defer p.stdinWG.Done()
	buf := make([]byte, 1<<20)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := p.write(ctx, buf[:n]); err != nil {
				p.setStdinErr(err)
				return
			}
		}
		if rerr == io.EOF {
			p.setStdinErr(p.closeStdin(ctx))
			return
		}
		if rerr != nil {
			p.setStdinErr(rerr)
			return
		}
	}
}

func (p *Process) setStdinErr(err error) {
	// A process that exits before reading all its input is not an error of ours.
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrCanceled) {
		return
	}
	p.mu.Lock()
	if p.stdinErr == nil {
		p.stdinErr = err
	}
	p.mu.Unlock()
}

// Next returns the next output chunk; io.EOF once the process has exited (ExitStatus then
// tells how). Call it from one goroutine at a time.
func (p *Process) Next() (Event, error) {
	p.mu.Lock()
	if p.exit != nil || p.err != nil {
		err := p.err
		p.mu.Unlock()
		if err == nil {
			err = io.EOF
		}
		return Event{}, err
	}
	p.mu.Unlock()
	for {
		m, err := p.stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = &Error{Code: "INTERNAL", Message: "the stream ended without an exit event"}
			} else {
				err = grpcError(err)
			}
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			return Event{}, err
		}
		switch ev := m.Event.(type) {
		case *pb.StartResponse_Stdout:
			return Event{Stream: StreamStdout, Data: ev.Stdout}, nil
		case *pb.StartResponse_Stderr:
			return Event{Stream: StreamStderr, Data: ev.Stderr}, nil
		case *pb.StartResponse_Exit:
			p.mu.Lock()
			p.exit = &ExitStatus{Code: int(ev.Exit.ExitCode)}
			p.mu.Unlock()
			if p.timer != nil {
				p.timer.Stop()
			}
			return Event{}, io.EOF
		}
	}
}

// ExitStatus is the exit status once Next has returned io.EOF, else nil.
func (p *Process) ExitStatus() *ExitStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Wait reads the output to the end, copying it to the Stdout/Stderr writers given to Start
// (discarding it otherwise), and returns the exit status.
func (p *Process) Wait() (ExitStatus, error) {
	for {
		ev, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ExitStatus{}, err
		}
		w := p.cfg.stdout
		if ev.Stream == StreamStderr {
			w = p.cfg.stderr
		}
		if w != nil {
			if _, err := w.Write(ev.Data); err != nil {
				return ExitStatus{}, err
			}
		}
	}
	p.stdinWG.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return *p.exit, p.stdinErr
}

// Write writes b to the process's stdin (io.Writer), in pieces of at most 1 MiB.
func (p *Process) Write(b []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.c.timeout)
	defer cancel()
	n := 0
	for len(b) > 0 {
		k := min(len(b), 1<<20)
		if err := p.write(ctx, b[:k]); err != nil {
			return n, err
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

func (p *Process) write(ctx context.Context, b []byte) error {
	ctx, cancel := p.c.rpcCtx(ctx, true)
	defer cancel()
	_, err := p.c.proc.WriteStdin(ctx, &pb.WriteStdinRequest{
		ProcessId: p.id, Payload: &pb.WriteStdinRequest_Input{Input: b}})
	return grpcError(err)
}

// CloseStdin sends end of file (on a PTY, the terminal's EOF character).
func (p *Process) CloseStdin() error {
	return p.closeStdin(context.Background())
}

func (p *Process) closeStdin(ctx context.Context) error {
	ctx, cancel := p.c.rpcCtx(ctx, true)
	defer cancel()
	_, err := p.c.proc.WriteStdin(ctx, &pb.WriteStdinRequest{
		ProcessId: p.id, Payload: &pb.WriteStdinRequest_Eof{}})
	return grpcError(err)
}

// Signal sends sig to the process's group. process.v1 carries SIGINT, SIGTERM and SIGKILL;
// the daemon refuses others with INVALID_ARGUMENT.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	ctx, cancel := p.c.rpcCtx(ctx, true)
	defer cancel()
	_, err := p.c.proc.SendSignal(ctx, &pb.SendSignalRequest{ProcessId: p.id, Signal: pb.Signal(sig)})
	return grpcError(err)
}

// Kill sends SIGKILL to the process's group.
func (p *Process) Kill(ctx context.Context) error { return p.Signal(ctx, syscall.SIGKILL) }

// Resize sets the size of the process's terminal (ErrFailedPrecondition without a PTY).
func (p *Process) Resize(ctx context.Context, rows, cols uint32) error {
	ctx, cancel := p.c.rpcCtx(ctx, true)
	defer cancel()
	_, err := p.c.proc.ResizeTTY(ctx, &pb.ResizeTTYRequest{ProcessId: p.id, Rows: rows, Cols: cols})
	return grpcError(err)
}

// Close ends the stream; a process still running is killed by the daemon.
func (p *Process) Close() error {
	if p.timer != nil {
		p.timer.Stop()
	}
	p.cancel()
	p.stdinWG.Wait()
	return nil
}
