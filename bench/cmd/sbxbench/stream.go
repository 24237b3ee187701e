package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"time"

	"google.golang.org/grpc"
	pb "sigs.k8s.io/agent-sandbox/packages/sandboxd/spec/process/v1"
)

const headPath = "/usr/bin/head"

// cmdStream: Start `head -c BYTES /dev/zero` and count the stdout bytes received. Throughput is
// bytes over the time from sending the request to receiving the exit event.
func cmdStream(args []string) error {
	fs := flag.NewFlagSet("stream", flag.ExitOnError)
	addr := fs.String("addr", "", "daemon address host:port")
	label := fs.String("label", "", "name of the daemon in the report")
	chunk := fs.String("chunk", "default", "the daemon's --stream-chunk-size, for the report")
	n := fs.Int64("bytes", 1<<30, "bytes to stream")
	window := fs.Int("window", 0, "fixed HTTP/2 window in bytes (0: grpc-go defaults with BDP estimation)")
	pid := fs.Int("pid", 0, "daemon pid, for its CPU time")
	protoDecode := fs.Bool("proto", false, "decode every message with the generated proto types (slower client)")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	// Fewer garbage collections of the transport's buffers: less client CPU per byte.
	debug.SetGCPercent(400)

	cc, err := dial(*addr, int32(*window))
	if err != nil {
		return err
	}
	defer cc.Close()
	c := pb.NewProcessServiceClient(cc)
	// A round trip first, so that connecting is not timed.
	if _, err := c.SendSignal(context.Background(), &pb.SendSignalRequest{ProcessId: 1 << 30, Signal: pb.Signal_SIGNAL_SIGTERM}); err == nil {
		return errors.New("SendSignal to a process that does not exist succeeded")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cpu0, dcpu0, csw0 := selfCPU(), procCPU(*pid), procCtxSwitches(*pid)
	t0 := time.Now()
	var call grpc.CallOption = grpc.EmptyCallOption{}
	if !*protoDecode {
		call = grpc.ForceCodecV2(startCodec{})
	}
	st, err := c.Start(ctx, &pb.StartRequest{Config: &pb.ProcessConfig{
		Command: []string{headPath, "-c", strconv.FormatInt(*n, 10), "/dev/zero"},
	}}, call)
	if err != nil {
		return err
	}
	var got, msgs, maxChunk int64
	exitCode := int32(-100)
	var ev startEvent
	for {
		var err error
		if *protoDecode {
			ev = startEvent{}
			if err = st.RecvMsg(&ev.msg); err == nil {
				ev.stdout, ev.stderr = len(ev.msg.GetStdout()), len(ev.msg.GetStderr())
			}
		} else {
			err = st.RecvMsg(&ev)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("after %d bytes: %w", got, err)
		}
		switch {
		case ev.stdout > 0:
			l := int64(ev.stdout)
			got += l
			msgs++
			if l > maxChunk {
				maxChunk = l
			}
		case ev.stderr > 0:
			return fmt.Errorf("%d bytes on stderr", ev.stderr)
		case ev.msg.GetExit() != nil:
			exitCode = ev.msg.GetExit().ExitCode
		}
	}
	el := time.Since(t0)
	cpu1, dcpu1, csw1 := selfCPU(), procCPU(*pid), procCtxSwitches(*pid)
	if exitCode != 0 {
		return fmt.Errorf("exit code %d", exitCode)
	}
	ok := got == *n
	rec := map[string]any{
		"kind":       "stream",
		"label":      *label,
		"chunk":      *chunk,
		"bytes":      got,
		"want_bytes": *n,
		"verified":   ok,
		"messages":   msgs,
		"avg_chunk":  round(float64(got)/float64(max(msgs, 1)), 1),
		"max_chunk":  maxChunk,
		"seconds":    round(el.Seconds(), 4),
		"mb_per_s":   round(float64(got)/el.Seconds()/1e6, 1),
		"client_cpu": round(cpu1-cpu0, 3),
		"window":     *window,
	}
	if dcpu0 >= 0 && dcpu1 >= 0 {
		rec["daemon_cpu"] = round(dcpu1-dcpu0, 3)
		rec["daemon_ns_per_byte"] = round((dcpu1-dcpu0)*1e9/float64(max(got, 1)), 3)
	}
	if csw0 >= 0 && csw1 >= 0 {
		rec["daemon_csw_per_msg"] = round(float64(csw1-csw0)/float64(max(msgs, 1)), 2)
	}
	fmt.Fprintf(os.Stderr, "  stream %-6s chunk=%-7s %9.1f MB/s  %d bytes in %d msgs (avg %.0f)  verified=%v  client cpu %.2fs  daemon cpu %v s\n",
		*label, *chunk, rec["mb_per_s"], got, msgs, rec["avg_chunk"], ok, cpu1-cpu0, rec["daemon_cpu"])
	if err := emit(*out, rec); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("received %d bytes, want %d", got, *n)
	}
	return nil
}

// cmdPipe: the local floor of streaming, `head -c BYTES /dev/zero` into a pipe read by this
// process with a buffer of -buf bytes.
func cmdPipe(args []string) error {
	fs := flag.NewFlagSet("pipe", flag.ExitOnError)
	n := fs.Int64("bytes", 1<<30, "bytes to stream")
	bufSize := fs.Int("buf", 65536, "read buffer size")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)

	cmd := exec.Command(headPath, "-c", strconv.FormatInt(*n, 10), "/dev/zero")
	rd, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cpu0 := selfCPU()
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	buf := make([]byte, *bufSize)
	var got int64
	f := rd.(*os.File)
	for {
		k, err := f.Read(buf)
		got += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return err
	}
	el := time.Since(t0)
	cpu1 := selfCPU()
	ok := got == *n
	rec := map[string]any{
		"kind":       "pipe",
		"label":      "local",
		"bytes":      got,
		"verified":   ok,
		"buf":        *bufSize,
		"seconds":    round(el.Seconds(), 4),
		"mb_per_s":   round(float64(got)/el.Seconds()/1e6, 1),
		"client_cpu": round(cpu1-cpu0, 3),
	}
	fmt.Fprintf(os.Stderr, "  pipe   local  buf=%-7d %9.1f MB/s  %d bytes  verified=%v\n", *bufSize, rec["mb_per_s"], got, ok)
	if err := emit(*out, rec); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("read %d bytes, want %d", got, *n)
	}
	return nil
}
