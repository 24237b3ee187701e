package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

// A terminal under test: `cat` on a pty in cooked mode, reached through one of the transports
// (term_conn.go). Typed bytes come back as the line discipline's echo, which the kernel writes
// before `cat` even wakes; a newline brings the echo of the newline and cat's copy of the line.

// arrival is output of the terminal as the transport's reader received it, stamped the moment
// its read returned (so a hand-off to the measuring goroutine is not counted).
type arrival struct {
	t   time.Time
	b   []byte
	err error
}

// termConn is one terminal: send delivers one keystroke message (a write, a frame, a call),
// out carries the output, close ends the process and the connection.
type termConn interface {
	send(b []byte) error
	out() <-chan arrival
	close() error
}

// echoWait bounds every wait for an echo: a terminal that does not answer in it is a failure.
const echoWait = 10 * time.Second

// expect reads arrivals until n bytes came and returns them with the time of the last one.
// More than n bytes is an error: nothing else is pending when it is called.
func expect(tc termConn, n int) ([]byte, time.Time, error) {
	var got []byte
	timer := time.NewTimer(echoWait)
	defer timer.Stop()
	for len(got) < n {
		select {
		case a, ok := <-tc.out():
			if !ok {
				return got, time.Time{}, fmt.Errorf("the terminal's output ended after %q", got)
			}
			if a.err != nil {
				return got, time.Time{}, a.err
			}
			got = append(got, a.b...)
			if len(got) >= n {
				if len(got) > n {
					return got, time.Time{}, fmt.Errorf("unexpected output: %q, want %d bytes", got, n)
				}
				return got, a.t, nil
			}
		case <-timer.C:
			return got, time.Time{}, fmt.Errorf("no echo within %v (got %q of %d bytes)", echoWait, got, n)
		}
	}
	return got, time.Now(), nil
}

// endLine types a newline after a line of n keys and waits for its echo and cat's copy of the
// line (untimed): "\r\n" and "a...a\r\n", in either order.
func endLine(tc termConn, n int) error {
	if err := tc.send([]byte{'\n'}); err != nil {
		return err
	}
	got, _, err := expect(tc, n+4)
	if err != nil {
		return err
	}
	if bytes.Count(got, []byte{'a'}) != n || bytes.Count(got, []byte("\r\n")) != 2 {
		return fmt.Errorf("after a newline: %q, want the echo and a line of %d keys", got, n)
	}
	return nil
}

var key = []byte{'a'}

// keyLoop types keys one at a time, each after the previous one's echo, a newline after every
// line keys (not timed); it returns the keystroke-to-echo times in µs of all but the first line.
func keyLoop(tc termConn, keys, line int) ([]float64, error) {
	samples := make([]float64, 0, keys)
	col := 0
	for i := 0; i < keys+line; i++ {
		t0 := time.Now()
		if err := tc.send(key); err != nil {
			return nil, err
		}
		got, t1, err := expect(tc, 1)
		if err != nil {
			return nil, err
		}
		if got[0] != 'a' {
			return nil, fmt.Errorf("echo %q, want \"a\"", got)
		}
		if i >= line {
			samples = append(samples, us(t1.Sub(t0)))
		}
		if col++; col == line {
			if err := endLine(tc, line); err != nil {
				return nil, err
			}
			col = 0
		}
	}
	if col > 0 {
		if err := endLine(tc, col); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// burstLoop types n keys as fast as the transport takes them, one message each, then waits
// for all their echoes; it returns each burst's time from the first send to the last echo.
func burstLoop(tc termConn, bursts, n int) ([]float64, error) {
	var samples []float64
	for b := 0; b < bursts; b++ {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := tc.send(key); err != nil {
				return nil, err
			}
		}
		got, t1, err := expect(tc, n)
		if err != nil {
			return nil, err
		}
		if bytes.Count(got, key) != n {
			return nil, fmt.Errorf("burst echo %q, want %d keys", got, n)
		}
		samples = append(samples, us(t1.Sub(t0)))
		if err := endLine(tc, n); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// cmdTerm: keystroke-to-echo round trips and bursts on one terminal over one transport.
func cmdTerm(args []string) error {
	fs := flag.NewFlagSet("term", flag.ExitOnError)
	transport := fs.String("transport", "", "pty (the local floor), ws, grpc (process.v1 Start) or procs (sandboxd.v1.Processes)")
	addr := fs.String("addr", "", "daemon gRPC address host:port (ws: to spawn the process)")
	url := fs.String("url", "", "daemon REST base URL, http://host:port (ws)")
	label := fs.String("label", "local", "name of the daemon in the report (ours, ref)")
	pid := fs.Int("pid", 0, "daemon pid, for its CPU time and context switches")
	keys := fs.Int("keys", 1000, "timed keystrokes (after one untimed line)")
	line := fs.Int("line", 32, "keys per line: a newline after each (untimed)")
	bursts := fs.Int("bursts", 20, "bursts (0: none)")
	burst := fs.Int("burst", 100, "keys per burst")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	if *keys < 1 || *line < 1 || *line > 1000 || *burst < 1 || *burst > 1000 || *bursts < 0 {
		return errors.New("-keys and -line, -burst (at most 1000: a cooked line holds 4095) must be positive")
	}

	var tc termConn
	var err error
	switch *transport {
	case "pty":
		tc, err = openPTY()
	case "ws":
		tc, err = openWS(*addr, *url)
	case "grpc":
		tc, err = openStart(*addr)
	case "procs":
		tc, err = openProcs(*addr)
	default:
		return fmt.Errorf("-transport %q: want pty, ws, grpc or procs", *transport)
	}
	if err != nil {
		return err
	}
	defer tc.close()

	dcpu0, csw0 := procSchedCPU(*pid), procCtxSwitches(*pid)
	samples, err := keyLoop(tc, *keys, *line)
	if err != nil {
		return fmt.Errorf("%s %s: keystrokes: %w", *label, *transport, err)
	}
	dcpu1, csw1 := procSchedCPU(*pid), procCtxSwitches(*pid)
	bs, err := burstLoop(tc, *bursts, *burst)
	if err != nil {
		return fmt.Errorf("%s %s: bursts: %w", *label, *transport, err)
	}
	dcpu2, csw2 := procSchedCPU(*pid), procCtxSwitches(*pid)
	if err := tc.close(); err != nil {
		return fmt.Errorf("%s %s: closing: %w", *label, *transport, err)
	}
	st, bst := summarize(samples), summarize(bs)
	// Keys typed in the timed part: the keys and their lines' newlines.
	typed := float64(*keys + (*keys+*line-1) / *line)
	rec := map[string]any{
		"kind":       "term",
		"label":      *label,
		"transport":  *transport,
		"samples_us": samples,
		"burst_us":   bs,
		"burst_keys": *burst,
		"line":       *line,
		"p50_us":     jnum(st.p50),
		"p99_us":     jnum(st.p99),
		"burst_p50":  jnum(bst.p50),
	}
	if dcpu0 >= 0 && dcpu1 >= 0 && csw0 >= 0 && csw1 >= 0 {
		rec["daemon_us_per_key"] = round((dcpu1-dcpu0)*1e6/typed, 1)
		rec["daemon_csw_per_key"] = round(float64(csw1-csw0)/typed, 2)
		// In the bursts: the bursts' keys and newlines.
		typed = float64(*bursts * (*burst + 1))
		rec["daemon_us_per_burst_key"] = round((dcpu2-dcpu1)*1e6/typed, 1)
		rec["daemon_csw_per_burst_key"] = round(float64(csw2-csw1)/typed, 2)
	}
	fmt.Fprintf(os.Stderr, "  term   %-5s %-5s  key p50 %7.1f µs  p99 %7.1f µs  (%d keys)  burst of %d p50 %8.1f µs  daemon a key %v µs, %v cs (in bursts %v µs, %v cs)\n",
		*label, *transport, st.p50, st.p99, st.n, *burst, bst.p50, rec["daemon_us_per_key"], rec["daemon_csw_per_key"],
		rec["daemon_us_per_burst_key"], rec["daemon_csw_per_burst_key"])
	return emit(*out, rec)
}

// procSchedCPU returns the CPU seconds of process pid's live threads from their schedstat (ns,
// where /proc/PID/stat counts 10 ms ticks: too coarse for a few hundred keys), or -1. A thread
// that ends in between takes its time with it; the daemons' threads live as long as they do.
func procSchedCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return -1
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		var x int64
		if _, err := fmt.Sscan(string(b), &x); err == nil {
			ns += x
		}
	}
	return float64(ns) / 1e9
}
