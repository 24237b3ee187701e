package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	pb "sigs.k8s.io/agent-sandbox/packages/sandboxd/spec/process/v1"
)

// loopResult is what a closed-loop run of `clients` workers measured inside its window.
type loopResult struct {
	samples   []float64 // µs, calls that started and ended inside the window
	completed int       // calls that ended inside the window (the calls/s numerator)
	window    time.Duration
	errors    int64
	firstErr  error
	clientCPU float64 // this process's CPU seconds during the window
	daemonCPU float64 // the daemon's CPU seconds during the window, -1 when unknown
	daemonCSW int64   // the daemon's context switches during the window, -1 when unknown
}

// closedLoop runs `clients` workers, each calling call(worker) back to back, for warmup (not
// recorded) and then for duration (recorded).
func closedLoop(clients int, warmup, duration time.Duration, pid int, call func(w int) error) loopResult {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		res      loopResult
		stop     atomic.Bool
		errCount atomic.Int64
	)
	start := time.Now().Add(warmup)
	end := start.Add(duration)
	per := make([][]float64, clients)
	done := make([]int, clients)
	var cpu0, dcpu0 float64
	var csw0 int64
	cpuTimer := time.AfterFunc(warmup, func() { cpu0, dcpu0, csw0 = selfCPU(), procCPU(pid), procCtxSwitches(pid) })
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]float64, 0, 4096)
			for !stop.Load() {
				t0 := time.Now()
				err := call(w)
				t1 := time.Now()
				if t1.After(end) {
					stop.Store(true)
				}
				if err != nil {
					if errCount.Add(1) == 1 {
						mu.Lock()
						res.firstErr = err
						mu.Unlock()
					}
					if errCount.Load() > 100 {
						stop.Store(true)
					}
					continue
				}
				if !t1.Before(start) && !t1.After(end) {
					done[w]++
					if !t0.Before(start) {
						buf = append(buf, us(t1.Sub(t0)))
					}
				}
			}
			per[w] = buf
		}(w)
	}
	time.Sleep(time.Until(end))
	cpu1, dcpu1, csw1 := selfCPU(), procCPU(pid), procCtxSwitches(pid)
	wg.Wait()
	cpuTimer.Stop()
	for w := range per {
		res.samples = append(res.samples, per[w]...)
		res.completed += done[w]
	}
	res.window = duration
	res.errors = errCount.Load()
	res.clientCPU = cpu1 - cpu0
	res.daemonCPU = -1
	if dcpu0 >= 0 && dcpu1 >= 0 {
		res.daemonCPU = dcpu1 - dcpu0
	}
	res.daemonCSW = -1
	if csw0 >= 0 && csw1 >= 0 {
		res.daemonCSW = csw1 - csw0
	}
	return res
}

func (r loopResult) record(kind, label string) map[string]any {
	st := summarize(r.samples)
	if r.samples == nil {
		r.samples = []float64{}
	}
	rec := map[string]any{
		"kind":        kind,
		"label":       label,
		"samples_us":  r.samples,
		"completed":   r.completed,
		"window_s":    r.window.Seconds(),
		"calls_per_s": round(float64(r.completed)/r.window.Seconds(), 1),
		"p50_us":      jnum(st.p50),
		"p99_us":      jnum(st.p99),
		"errors":      r.errors,
		"client_cpu":  round(r.clientCPU, 3),
		"daemon_cpu":  jnum(round(r.daemonCPU, 3)),
		"daemon_csw":  r.daemonCSW,
	}
	if r.firstErr != nil {
		rec["first_error"] = r.firstErr.Error()
	}
	return rec
}

func progress(rec map[string]any) {
	fmt.Fprintf(os.Stderr, "  %-6s %-6s %-28v p50 %8v µs  p99 %8v µs  %8.1f calls/s  (client cpu %.2fs, daemon cpu %vs, errors %d)\n",
		rec["kind"], rec["label"], rec["what"], rec["p50_us"], rec["p99_us"], rec["calls_per_s"],
		rec["client_cpu"], rec["daemon_cpu"], rec["errors"])
}

// cmdExec: Execute of one program, closed loop, N concurrent clients.
func cmdExec(args []string) error {
	fs := flag.NewFlagSet("exec", flag.ExitOnError)
	addr := fs.String("addr", "", "daemon address host:port")
	label := fs.String("label", "", "name of the daemon in the report (ours, ref)")
	prog := fs.String("cmd", "/bin/true", "program to execute (absolute path, no arguments)")
	name := fs.String("name", "", "short name of the program in the report (default: -cmd)")
	clients := fs.Int("clients", 1, "concurrent clients (closed loop)")
	conns := fs.Int("conns", 1, "client connections the clients share round-robin")
	warmup := fs.Duration("warmup", 300*time.Millisecond, "unrecorded warm-up")
	duration := fs.Duration("duration", 2*time.Second, "recorded window")
	pid := fs.Int("pid", 0, "daemon pid, for its CPU time")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	if *name == "" {
		*name = *prog
	}
	if *conns < 1 {
		*conns = 1
	}
	cl := make([]pb.ProcessServiceClient, *conns)
	for i := range cl {
		cc, err := dial(*addr, 0)
		if err != nil {
			return err
		}
		defer cc.Close()
		cl[i] = pb.NewProcessServiceClient(cc)
	}
	req := &pb.ExecuteRequest{Config: &pb.ProcessConfig{Command: []string{*prog}}}
	res := closedLoop(*clients, *warmup, *duration, *pid, func(w int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := cl[w%len(cl)].Execute(ctx, req)
		if err != nil {
			return err
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("exit code %d, stderr %q", r.ExitCode, r.Stderr)
		}
		return nil
	})
	rec := res.record("exec", *label)
	rec["prog"] = *name
	rec["clients"] = *clients
	rec["conns"] = *conns
	rec["what"] = fmt.Sprintf("%s c=%d conns=%d", *name, *clients, *conns)
	progress(rec)
	delete(rec, "what")
	return emit(*out, rec)
}

// cmdRTT: one trivial gRPC round trip to the daemon. -method health (the floor's part) calls
// grpc.health.v1.Health/Check; a daemon without the health service answers UNIMPLEMENTED, which
// is still a full round trip through its gRPC stack (headers and trailers, no handler) and is
// recorded as such. -method unknown calls a method no daemon has, so both daemons do the same
// work: a comparison of the two gRPC stacks alone.
func cmdRTT(args []string) error {
	fs := flag.NewFlagSet("rtt", flag.ExitOnError)
	addr := fs.String("addr", "", "daemon address host:port")
	label := fs.String("label", "", "name of the daemon in the report")
	method := fs.String("method", "health", "health or unknown")
	warmup := fs.Duration("warmup", 300*time.Millisecond, "unrecorded warm-up")
	duration := fs.Duration("duration", 1*time.Second, "recorded window")
	pid := fs.Int("pid", 0, "daemon pid, for its CPU time")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	cc, err := dial(*addr, 0)
	if err != nil {
		return err
	}
	defer cc.Close()
	full := map[string]string{
		"health":  "/grpc.health.v1.Health/Check",
		"unknown": "/sbxbench.v1.NoSuchService/Nothing",
	}[*method]
	if full == "" {
		return fmt.Errorf("-method %q: want health or unknown", *method)
	}
	var answer atomic.Value
	res := closedLoop(1, *warmup, *duration, *pid, func(int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := cc.Invoke(ctx, full, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
		code := status.Code(err)
		answer.Store(code.String())
		if code == codes.OK || code == codes.Unimplemented {
			return nil
		}
		return err
	})
	rec := res.record("rtt", *label)
	rec["method"] = *method
	rec["answer"] = answer.Load()
	rec["what"] = fmt.Sprintf("%s -> %v", *method, answer.Load())
	progress(rec)
	delete(rec, "what")
	return emit(*out, rec)
}

// cmdSpawn: the local floor of one Execute's process work, spawn+wait of the same program from
// this process (Go's syscall.ForkExec is clone(CLONE_VM|CLONE_VFORK)+execve, as posix_spawn;
// stdio on /dev/null).
func cmdSpawn(args []string) error {
	fs := flag.NewFlagSet("spawn", flag.ExitOnError)
	prog := fs.String("cmd", "/bin/true", "program to spawn")
	name := fs.String("name", "", "short name of the program in the report (default: -cmd)")
	clients := fs.Int("clients", 1, "concurrent spawners")
	warmup := fs.Duration("warmup", 300*time.Millisecond, "unrecorded warm-up")
	duration := fs.Duration("duration", 1*time.Second, "recorded window")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	if *name == "" {
		*name = *prog
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	fd := null.Fd()
	attr := &syscall.ProcAttr{Env: []string{"PATH=/usr/bin:/bin"}, Files: []uintptr{fd, fd, fd}}
	argv := []string{*prog}
	res := closedLoop(*clients, *warmup, *duration, 0, func(int) error {
		pid, err := syscall.ForkExec(*prog, argv, attr)
		if err != nil {
			return err
		}
		var ws syscall.WaitStatus
		for {
			_, err = syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		if err != nil {
			return err
		}
		if ws.ExitStatus() != 0 {
			return fmt.Errorf("exit status %d", ws.ExitStatus())
		}
		return nil
	})
	rec := res.record("spawn", "local")
	rec["prog"] = *name
	rec["clients"] = *clients
	rec["what"] = fmt.Sprintf("%s c=%d", *name, *clients)
	progress(rec)
	delete(rec, "what")
	return emit(*out, rec)
}
