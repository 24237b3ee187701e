package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/emptypb"
	pb "sigs.k8s.io/agent-sandbox/packages/sandboxd/spec/process/v1"
)

const wcPath = "/usr/bin/wc"

// cmdStdin: Start `wc -c` and feed it BYTES of stdin through process.v1's WriteStdin, one call
// per -chunk bytes (1 MiB, as the Python SDK writes), then the end of file; the count wc prints
// must be BYTES. Throughput is bytes over the time from the first write to the exit event: each
// call waits for its answer before the next goes, as an SDK's writes do, so a path's round trip
// counts once per chunk.
func cmdStdin(args []string) error {
	fs := flag.NewFlagSet("stdin", flag.ExitOnError)
	addr := fs.String("addr", "", "daemon address host:port")
	label := fs.String("label", "", "name of the path in the report")
	n := fs.Int64("bytes", 100<<20, "bytes to write")
	chunk := fs.Int("chunk", 1<<20, "bytes per WriteStdin call")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	if *n <= 0 || *chunk <= 0 || *chunk > 16<<20 {
		return errors.New("-bytes must be > 0 and -chunk in (0, 16 MiB]")
	}

	cc, err := dial(*addr, 0)
	if err != nil {
		return err
	}
	defer cc.Close()
	c := pb.NewProcessServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := c.Start(ctx, &pb.StartRequest{Config: &pb.ProcessConfig{Command: []string{wcPath, "-c"}}})
	if err != nil {
		return err
	}
	first, err := st.Recv()
	if err != nil {
		return fmt.Errorf("waiting for the init event: %w", err)
	}
	if first.GetInit() == nil {
		return fmt.Errorf("first event is not init: %v", first)
	}
	id := first.GetInit().ProcessId

	buf := make([]byte, *chunk)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	cpu0 := selfCPU()
	t0 := time.Now()
	var sent int64
	for sent < *n {
		k := min(int64(len(buf)), *n-sent)
		if _, err := c.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id,
			Payload: &pb.WriteStdinRequest_Input{Input: buf[:k]}}); err != nil {
			return fmt.Errorf("after %d bytes: %w", sent, err)
		}
		sent += k
	}
	if _, err := c.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: id,
		Payload: &pb.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}}); err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	var stdout strings.Builder
	exitCode := int32(-100)
	for {
		ev, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("after the end of stdin: %w", err)
		}
		if ev.GetExit() != nil {
			exitCode = ev.GetExit().ExitCode
		}
		if stdout.Len() < 64 {
			stdout.Write(ev.GetStdout())
		}
	}
	el := time.Since(t0)
	cpu1 := selfCPU()
	if exitCode != 0 {
		return fmt.Errorf("wc exited %d", exitCode)
	}
	counted, err := strconv.ParseInt(strings.TrimSpace(stdout.String()), 10, 64)
	ok := err == nil && counted == *n
	rec := map[string]any{
		"kind":       "stdin",
		"label":      *label,
		"bytes":      sent,
		"want_bytes": *n,
		"counted":    counted,
		"verified":   ok,
		"chunk":      *chunk,
		"calls":      (sent + int64(*chunk) - 1) / int64(*chunk),
		"seconds":    round(el.Seconds(), 4),
		"mb_per_s":   round(float64(sent)/el.Seconds()/1e6, 1),
		"client_cpu": round(cpu1-cpu0, 3),
	}
	fmt.Fprintf(os.Stderr, "  stdin  %-6s %9.1f MB/s  %d bytes in %d calls  wc counted %d  verified=%v\n",
		*label, rec["mb_per_s"], sent, rec["calls"], counted, ok)
	if err := emit(*out, rec); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("wc counted %q, want %d", strings.TrimSpace(stdout.String()), *n)
	}
	return nil
}
