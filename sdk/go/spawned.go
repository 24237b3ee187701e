package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xpb "github.com/sandboxd/sandboxd/sdk/go/internal/processespb"
)

// This file is sandboxd.v1.Processes: processes that outlive the calls that start them,
// listed, reattached from any output offset, waited for, signalled with a scope, with exit
// detail. A daemon without it (the reference) answers ErrUnimplemented.

// ExitDetail tells how a spawned process ended. Code is -1 when a signal ended it; Signal
// is that signal (else 0); Reason is "exited", "signaled" (a signal nobody here sent),
// "killed" (after a client's Signal), "timed_out", "oom_killed" or "shutdown".
type ExitDetail struct {
	Code       int    `json:"exit_code"`
	Signal     int    `json:"signal"`
	CoreDumped bool   `json:"core_dumped"`
	Reason     string `json:"reason"`
}

// StreamOffsets: a stream's ring holds bytes [Start, End); End is all the process wrote.
type StreamOffsets struct {
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

// ProcessInfo describes a spawned process; State is "running" or "exited".
type ProcessInfo struct {
	ID        int32         `json:"id"`
	PID       int32         `json:"pid"`
	Tag       string        `json:"tag"`
	Command   []string      `json:"command"`
	State     string        `json:"state"`
	StartedAt time.Time     `json:"started_at"`
	ExitedAt  *time.Time    `json:"exited_at,omitempty"`
	Exit      *ExitDetail   `json:"exit,omitempty"`
	Stdout    StreamOffsets `json:"stdout"`
	Stderr    StreamOffsets `json:"stderr"`
	PTY       bool          `json:"pty"`
	Stdin     bool          `json:"stdin"`
}

var reasons = map[xpb.ExitReason]string{
	xpb.ExitReason_EXIT_REASON_EXITED: "exited", xpb.ExitReason_EXIT_REASON_SIGNALED: "signaled",
	xpb.ExitReason_EXIT_REASON_KILLED: "killed", xpb.ExitReason_EXIT_REASON_TIMED_OUT: "timed_out",
	xpb.ExitReason_EXIT_REASON_OOM_KILLED: "oom_killed", xpb.ExitReason_EXIT_REASON_SHUTDOWN: "shutdown",
}

func exitDetail(e *xpb.ExitStatus) *ExitDetail {
	if e == nil {
		return nil
	}
	r, ok := reasons[e.Reason]
	if !ok {
		r = "unknown"
	}
	return &ExitDetail{Code: int(e.ExitCode), Signal: int(e.Signal), CoreDumped: e.CoreDumped, Reason: r}
}

func processInfo(m *xpb.ProcessInfo) *ProcessInfo {
	p := &ProcessInfo{
		ID: m.Id, PID: m.Pid, Tag: m.Tag, Command: m.Command, State: "running",
		Stdout: StreamOffsets{m.GetStdout().GetStart(), m.GetStdout().GetEnd()},
		Stderr: StreamOffsets{m.GetStderr().GetStart(), m.GetStderr().GetEnd()},
		PTY:    m.Pty, Stdin: m.Stdin,
	}
	if m.StartedAt != nil {
		p.StartedAt = m.StartedAt.AsTime()
	}
	if m.State == xpb.State_STATE_EXITED {
		p.State = "exited"
		p.Exit = exitDetail(m.Exit)
		if m.ExitedAt != nil {
			t := m.ExitedAt.AsTime()
			p.ExitedAt = &t
		}
	}
	return p
}

// Tag labels a spawned process (List filters on it).
func Tag(tag string) ProcOption { return func(p *procConfig) { p.spec().Tag = tag } }

// OpenStdin keeps a spawned process's stdin open as a pipe for Spawned.Write.
func OpenStdin() ProcOption { return func(p *procConfig) { p.spec().Stdin = true } }

// Grace is the time between a timeout's SIGTERM and its SIGKILL (Spawn, RunProcess).
func Grace(d time.Duration) ProcOption {
	return func(p *procConfig) { p.spec().GraceMs = uint64(d.Milliseconds()) }
}

// User runs the process as uid and gid with these supplementary groups (Spawn, RunProcess;
// the daemon must be root).
func User(uid, gid uint32, groups ...uint32) ProcOption {
	return func(p *procConfig) { p.spec().User = &xpb.Credentials{Uid: uid, Gid: gid, Groups: groups} }
}

// Rlimit sets a resource limit before exec: name as setrlimit's, lower case ("nofile").
func Rlimit(name string, soft, hard uint64) ProcOption {
	return func(p *procConfig) {
		s := p.spec()
		s.Rlimits = append(s.Rlimits, &xpb.ResourceLimit{Name: name, Soft: soft, Hard: hard})
	}
}

// MemoryLimit bounds the memory of the process's whole tree (a cgroup; Spawn, RunProcess).
func MemoryLimit(bytes uint64) ProcOption {
	return func(p *procConfig) { p.limits().MemoryBytes = bytes }
}

// PidsLimit bounds the processes and threads of its whole tree (Spawn, RunProcess).
func PidsLimit(n uint64) ProcOption { return func(p *procConfig) { p.limits().Pids = n } }

// Seccomp picks the seccomp profile of the process: "default", "off", or "" for the daemon's
// own (its --seccomp). The daemon refuses any other value (ErrInvalidArgument). "off" is for
// a process that needs what the profile refuses (mount in a namespace of its own, a tracer);
// the sandbox's runtime stays the boundary (Spawn, RunProcess).
func Seccomp(profile string) ProcOption { return func(p *procConfig) { p.spec().Seccomp = profile } }

func (p *procConfig) spec() *xpb.ProcessSpec {
	if p.ext == nil {
		p.ext = &xpb.ProcessSpec{}
	}
	return p.ext
}

func (p *procConfig) limits() *xpb.Limits {
	s := p.spec()
	if s.Limits == nil {
		s.Limits = &xpb.Limits{}
	}
	return s.Limits
}

// buildSpec makes the ProcessSpec of Spawn and RunProcess from the options.
func buildSpec(cmd []string, opts []ProcOption) (*xpb.ProcessSpec, *procConfig, error) {
	if len(cmd) == 0 {
		return nil, nil, &Error{Code: "INVALID_ARGUMENT", Message: "empty command"}
	}
	pc := &procConfig{}
	for _, o := range opts {
		o(pc)
	}
	s := pc.spec()
	s.Command, s.Env = cmd, pc.env
	if pc.dir != nil {
		s.Cwd = *pc.dir
	}
	if pc.pty != nil {
		s.Pty = &xpb.TerminalSize{Rows: pc.pty.Rows, Cols: pc.pty.Cols}
	}
	if pc.timeout > 0 {
		s.TimeoutMs = uint64(max(pc.timeout.Milliseconds(), 1))
	}
	return s, pc, nil
}

func (c *Client) xcall(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.rpcCtx(ctx, true)
}

// Spawn starts a process that runs until it exits, whoever is attached. Options: Env, Dir,
// Tag, OpenStdin, PTY, Timeout (SIGTERM to its tree, SIGKILL after Grace), User, Rlimit,
// MemoryLimit, PidsLimit, Seccomp.
func (c *Client) Spawn(ctx context.Context, cmd []string, opts ...ProcOption) (*Spawned, error) {
	s, pc, err := buildSpec(cmd, opts)
	if err != nil {
		return nil, err
	}
	if pc.stdin != nil || pc.stdout != nil || pc.stderr != nil {
		return nil, &Error{Code: "INVALID_ARGUMENT", Message: "Spawn takes OpenStdin, not Stdin/Stdout/Stderr"}
	}
	ctx, cancel := c.xcall(ctx)
	defer cancel()
	m, err := c.jobs.Spawn(ctx, &xpb.SpawnRequest{Spec: s})
	if err != nil {
		return nil, grpcError(err)
	}
	return &Spawned{c: c, ID: m.Id, Info: processInfo(m)}, nil
}

// RunProcess runs cmd to completion in one call. The daemon keeps the last MaxOutput bytes
// per stream (default: its --max-output-bytes) and tells how it ended (Result.Exit).
// Stdin, if given, is read whole (at most 3 MiB) and sent with the request.
func (c *Client) RunProcess(ctx context.Context, cmd []string, opts ...ProcOption) (*Result, error) {
	s, pc, err := buildSpec(cmd, opts)
	if err != nil {
		return nil, err
	}
	req := &xpb.RunRequest{Spec: s, OutputLimitBytes: uint64(max(pc.maxOutput, 0))}
	if pc.stdin != nil {
		b, err := io.ReadAll(io.LimitReader(pc.stdin, 3<<20+1))
		if err != nil {
			return nil, err
		}
		if len(b) > 3<<20 {
			return nil, &Error{Code: "INVALID_ARGUMENT", Message: "RunProcess stdin over 3 MiB: use Spawn with OpenStdin"}
		}
		req.Stdin = b
	}
	ctx, md := c.rpcCtx(ctx, false)
	defer md()
	r, err := c.jobs.Run(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	ex := exitDetail(r.Exit)
	return &Result{
		ExitCode: ex.Code, Stdout: r.Stdout, Stderr: r.Stderr, StdoutTruncated: r.StdoutTruncated,
		StderrTruncated: r.StderrTruncated, TimedOut: ex.Reason == "timed_out", Exit: ex,
		StdoutTotal: r.StdoutTotal, StderrTotal: r.StderrTotal,
		StdoutDropped: int64(r.StdoutTotal) - int64(len(r.Stdout)),
		StderrDropped: int64(r.StderrTotal) - int64(len(r.Stderr)),
	}, nil
}

// ListProcesses lists spawned processes (running, and exited ones still kept); tag "" for all.
func (c *Client) ListProcesses(ctx context.Context, tag string) ([]*ProcessInfo, error) {
	ctx, cancel := c.xcall(ctx)
	defer cancel()
	r, err := c.jobs.List(ctx, &xpb.ListRequest{Tag: tag})
	if err != nil {
		return nil, grpcError(err)
	}
	out := make([]*ProcessInfo, len(r.Processes))
	for i, m := range r.Processes {
		out[i] = processInfo(m)
	}
	return out, nil
}

// GetProcess describes one spawned process (ErrNotFound once it is forgotten).
func (c *Client) GetProcess(ctx context.Context, id int32) (*ProcessInfo, error) {
	ctx, cancel := c.xcall(ctx)
	defer cancel()
	m, err := c.jobs.Get(ctx, &xpb.GetRequest{Id: id})
	if err != nil {
		return nil, grpcError(err)
	}
	return processInfo(m), nil
}

// Process returns the handle of a spawned process by id (not checked: see GetProcess).
func (c *Client) Process(id int32) *Spawned { return &Spawned{c: c, ID: id} }

// Spawned is the handle of a spawned process. Nothing here kills it when the handle goes
// away: it runs until it exits.
type Spawned struct {
	c    *Client
	ID   int32
	Info *ProcessInfo // as of Spawn or the last Refresh
}

// Refresh updates Info.
func (s *Spawned) Refresh(ctx context.Context) (*ProcessInfo, error) {
	info, err := s.c.GetProcess(ctx, s.ID)
	if err == nil {
		s.Info = info
	}
	return info, err
}

// Wait returns once the process has exited (bounded by ctx only).
func (s *Spawned) Wait(ctx context.Context) (*ExitDetail, error) {
	ctx, md := s.c.rpcCtx(ctx, false)
	defer md()
	m, err := s.c.jobs.Wait(ctx, &xpb.WaitRequest{Id: s.ID})
	if err != nil {
		return nil, grpcError(err)
	}
	s.Info = processInfo(m)
	return s.Info.Exit, nil
}

// Scope says what a Signal reaches.
type Scope int

const (
	ScopeGroup   Scope = Scope(xpb.SignalScope_SIGNAL_SCOPE_GROUP)   // the process group
	ScopeProcess Scope = Scope(xpb.SignalScope_SIGNAL_SCOPE_PROCESS) // the process alone
	ScopeTree    Scope = Scope(xpb.SignalScope_SIGNAL_SCOPE_TREE)    // it and every descendant
)

// Signal sends any signal to the scope; returns how many processes got it.
func (s *Spawned) Signal(ctx context.Context, sig syscall.Signal, scope Scope) (int, error) {
	ctx, cancel := s.c.xcall(ctx)
	defer cancel()
	r, err := s.c.jobs.Signal(ctx, &xpb.SignalRequest{Id: s.ID, Signal: int32(sig), Scope: xpb.SignalScope(scope)})
	if err != nil {
		return 0, grpcError(err)
	}
	return int(r.Count), nil
}

// Write writes data to its stdin (spawned with OpenStdin, or a PTY) in pieces of 1 MiB; eof
// closes stdin after it.
func (s *Spawned) Write(ctx context.Context, data []byte, eof bool) error {
	for first := true; first || len(data) > 0; first = false {
		k := min(len(data), 1<<20)
		cctx, cancel := s.c.xcall(ctx)
		_, err := s.c.jobs.WriteStdin(cctx, &xpb.WriteStdinRequest{Id: s.ID, Data: data[:k], Eof: eof && k == len(data)})
		cancel()
		if err != nil {
			return grpcError(err)
		}
		data = data[k:]
	}
	return nil
}

// Resize sets its terminal's size.
func (s *Spawned) Resize(ctx context.Context, rows, cols uint32) error {
	ctx, cancel := s.c.xcall(ctx)
	defer cancel()
	_, err := s.c.jobs.Resize(ctx, &xpb.ResizeRequest{Id: s.ID, Size: &xpb.TerminalSize{Rows: rows, Cols: cols}})
	return grpcError(err)
}

// Remove forgets the exited process and its output now.
func (s *Spawned) Remove(ctx context.Context) error {
	ctx, cancel := s.c.xcall(ctx)
	defer cancel()
	_, err := s.c.jobs.Remove(ctx, &xpb.RemoveRequest{Id: s.ID})
	return grpcError(err)
}

type attachConfig struct {
	req xpb.AttachRequest
}

// AttachOption configures Attach.
type AttachOption func(*attachConfig)

// FromOffsets reads from these absolute offsets of stdout and stderr (default 0: all that
// the rings hold).
func FromOffsets(stdout, stderr uint64) AttachOption {
	return func(a *attachConfig) { a.req.StdoutOffset, a.req.StderrOffset = stdout, stderr }
}

// NoFollow ends the stream after the output held now instead of following until the exit.
func NoFollow() AttachOption { return func(a *attachConfig) { a.req.Follow = false } }

// OnlyStream reads one stream and leaves the other out.
func OnlyStream(s Stream) AttachOption {
	return func(a *attachConfig) { a.req.SkipStdout, a.req.SkipStderr = s != StreamStdout, s != StreamStderr }
}

// AttachEvent is output (Data from Offset of Stream) or, when Truncated, the news that
// [From, To) of Stream was dropped from its ring before this reader got it.
type AttachEvent struct {
	Stream    Stream
	Offset    uint64
	Data      []byte
	Truncated bool
	From, To  uint64
}

// Attachment is an Attach stream; Close it (cancelling leaves the process alone).
type Attachment struct {
	stream xpb.Processes_AttachClient
	cancel context.CancelFunc
	// Exit is set once Next has returned io.EOF because the process exited.
	Exit *ExitDetail
}

// Attach streams the process's output: what its rings hold from the offsets, then (unless
// NoFollow) new output until it exits.
func (s *Spawned) Attach(ctx context.Context, opts ...AttachOption) (*Attachment, error) {
	ac := &attachConfig{req: xpb.AttachRequest{Id: s.ID, Follow: true}}
	for _, o := range opts {
		o(ac)
	}
	ctx, cancel := context.WithCancel(ctx)
	mctx, _ := s.c.rpcCtx(ctx, false)
	st, err := s.c.jobs.Attach(mctx, &ac.req)
	if err != nil {
		cancel()
		return nil, grpcError(err)
	}
	return &Attachment{stream: st, cancel: cancel}, nil
}

// Next returns the next event; io.EOF at the end (Exit then tells how it ended, or is nil
// without follow).
func (a *Attachment) Next() (AttachEvent, error) {
	for {
		m, err := a.stream.Recv()
		if err == io.EOF {
			return AttachEvent{}, io.EOF
		}
		if err != nil {
			if status.Code(err) == codes.Canceled {
				return AttachEvent{}, ErrCanceled
			}
			return AttachEvent{}, grpcError(err)
		}
		switch ev := m.Event.(type) {
		case *xpb.AttachEvent_Output:
			return AttachEvent{Stream: Stream(ev.Output.Stream), Offset: ev.Output.Offset, Data: ev.Output.Data}, nil
		case *xpb.AttachEvent_Truncated:
			return AttachEvent{Stream: Stream(ev.Truncated.Stream), Truncated: true, From: ev.Truncated.From, To: ev.Truncated.To}, nil
		case *xpb.AttachEvent_Exit:
			a.Exit = exitDetail(ev.Exit)
			return AttachEvent{}, io.EOF
		}
	}
}

// Copy writes the output to stdout and stderr (either may be nil) until the end, and calls
// truncated (if not nil) for each gap. It returns Exit.
func (a *Attachment) Copy(stdout, stderr io.Writer, truncated func(AttachEvent)) (*ExitDetail, error) {
	for {
		ev, err := a.Next()
		if errors.Is(err, io.EOF) {
			return a.Exit, nil
		}
		if err != nil {
			return nil, err
		}
		if ev.Truncated {
			if truncated != nil {
				truncated(ev)
			}
			continue
		}
		w := stdout
		if ev.Stream == StreamStderr {
			w = stderr
		}
		if w != nil {
			if _, err := w.Write(ev.Data); err != nil {
				return nil, fmt.Errorf("writing output: %w", err)
			}
		}
	}
}

// Close stops reading; the process goes on.
func (a *Attachment) Close() error {
	a.cancel()
	return nil
}
