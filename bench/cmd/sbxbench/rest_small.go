package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// wrkScript makes wrk print its summary as one JSON line (latencies in µs, as wrk records them).
const wrkScript = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
`

// cmdRestSmall: small GETs per second against -url, closed loop over -conns keep-alive
// connections: with wrk (-tool wrk, -threads threads) or, when wrk is not installed, a Go client
// (-tool go: one goroutine per connection, each sending its next request when the previous
// response has been read). An unrecorded warm-up run comes first.
func cmdRestSmall(args []string) error {
	fs := flag.NewFlagSet("restsmall", flag.ExitOnError)
	url := fs.String("url", "", "http://host:port/v1/...")
	label := fs.String("label", "", "name of the daemon in the report")
	what := fs.String("what", "", "name of the request in the report (file, health)")
	tool := fs.String("tool", "auto", "wrk, go, or auto (wrk when installed)")
	threads := fs.Int("threads", 2, "wrk threads")
	conns := fs.Int("conns", 32, "connections")
	duration := fs.Duration("duration", 5*time.Second, "recorded window")
	warmup := fs.Duration("warmup", time.Second, "unrecorded warm-up before the window")
	pid := fs.Int("pid", 0, "daemon pid, for its CPU time and context switches")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	if *tool == "auto" {
		*tool = "go"
		if _, err := exec.LookPath("wrk"); err == nil {
			*tool = "wrk"
		}
	}
	var rec map[string]any
	var err error
	switch *tool {
	case "wrk":
		rec, err = runWrk(*url, *threads, *conns, *duration, *warmup, *pid)
	case "go":
		rec, err = runGoSmall(*url, *conns, *duration, *warmup, *pid)
	default:
		err = fmt.Errorf("-tool %q: wrk, go or auto", *tool)
	}
	if err != nil {
		return err
	}
	rec["kind"] = "rest_small"
	rec["label"] = *label
	rec["what"] = *what
	rec["tool"] = *tool
	rec["conns"] = *conns
	fmt.Fprintf(os.Stderr, "  small  %-6s %-7s %-4s %9.0f req/s  p50 %6v µs  p99 %6v µs  errors %v  client cpu %vs  daemon cpu %vs (%v µs/req, %v cs/req)\n",
		*label, *what, *tool, rec["req_per_s"], rec["p50_us"], rec["p99_us"], rec["errors"], rec["client_cpu"],
		rec["daemon_cpu"], rec["daemon_us_per_req"], rec["daemon_csw_per_req"])
	return emit(*out, rec)
}

func smallRecord(requests int64, window time.Duration, errs int64, p50, p90, p99, clientCPU, dcpu0, dcpu1 float64, csw0, csw1 int64) map[string]any {
	rec := map[string]any{
		"requests":   requests,
		"window_s":   round(window.Seconds(), 4),
		"req_per_s":  round(float64(requests)/window.Seconds(), 1),
		"errors":     errs,
		"p50_us":     jnum(p50),
		"p90_us":     jnum(p90),
		"p99_us":     jnum(p99),
		"client_cpu": round(clientCPU, 3),
	}
	if dcpu0 >= 0 && dcpu1 >= 0 {
		rec["daemon_cpu"] = round(dcpu1-dcpu0, 3)
		rec["daemon_us_per_req"] = round((dcpu1-dcpu0)*1e6/float64(max(requests, 1)), 2)
	}
	if csw0 >= 0 && csw1 >= 0 {
		rec["daemon_csw_per_req"] = round(float64(csw1-csw0)/float64(max(requests, 1)), 3)
	}
	return rec
}

func runWrk(url string, threads, conns int, duration, warmup time.Duration, pid int) (map[string]any, error) {
	dir, err := os.MkdirTemp("", "sbxbench-wrk")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "report.lua")
	if err := os.WriteFile(script, []byte(wrkScript), 0o644); err != nil {
		return nil, err
	}
	// wrk takes whole seconds only.
	dur := func(d time.Duration) string { return fmt.Sprintf("%ds", max(1, int(d.Round(time.Second).Seconds()))) }
	if warmup > 0 {
		w := exec.Command("wrk", append(append([]string{"-t", fmt.Sprint(threads), "-c", fmt.Sprint(conns), "-d", dur(warmup)}, wrkHeaderArgs()...), url)...)
		w.Stdout, w.Stderr = io.Discard, os.Stderr
		if err := w.Run(); err != nil {
			return nil, fmt.Errorf("wrk warm-up: %w", err)
		}
	}
	cmd := exec.Command("wrk", append(append([]string{"-t", fmt.Sprint(threads), "-c", fmt.Sprint(conns), "-d", dur(duration), "-s", script}, wrkHeaderArgs()...), url)...)
	cmd.Stderr = os.Stderr
	dcpu0, csw0 := procCPU(pid), procCtxSwitches(pid)
	b, err := cmd.Output()
	dcpu1, csw1 := procCPU(pid), procCtxSwitches(pid)
	if err != nil {
		return nil, fmt.Errorf("wrk: %w: %s", err, b)
	}
	line := ""
	for _, l := range strings.Split(string(b), "\n") {
		if s, ok := strings.CutPrefix(l, "WRKJSON "); ok {
			line = s
		}
	}
	if line == "" {
		return nil, fmt.Errorf("no summary from wrk: %s", b)
	}
	var m map[string]float64
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return nil, err
	}
	requests, durUs := int64(m["requests"]), int64(m["duration_us"])
	errs := int64(m["err_connect"] + m["err_read"] + m["err_write"] + m["err_status"] + m["err_timeout"])
	var cpu float64 = -1
	if ps := cmd.ProcessState; ps != nil {
		cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	rec := smallRecord(requests, time.Duration(durUs)*time.Microsecond, errs, m["p50_us"], m["p90_us"], m["p99_us"], cpu, dcpu0, dcpu1, csw0, csw1)
	rec["threads"] = threads
	rec["mean_us"] = m["mean_us"]
	rec["max_us"] = m["max_us"]
	rec["errors_by_kind"] = map[string]float64{"connect": m["err_connect"], "read": m["err_read"], "write": m["err_write"], "status": m["err_status"], "timeout": m["err_timeout"]}
	rec["note"] = "daemon cpu over wrk's whole run (its start and connects included); client_cpu = wrk's"
	return rec, nil
}

// goConn is one keep-alive connection of the Go client.
type goConn struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func (g *goConn) get() error {
	if _, err := g.c.Write(g.req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(g.br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	if err == nil && resp.Close {
		err = fmt.Errorf("the daemon closed the connection (Connection: close)")
	}
	return err
}

func runGoSmall(url string, conns int, duration, warmup time.Duration, pid int) (map[string]any, error) {
	addr, path, err := splitURL(url)
	if err != nil {
		return nil, err
	}
	cs := make([]*goConn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		cs[i] = &goConn{c: c, br: bufio.NewReader(c), req: []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, addr, httpHeaderLines()))}
	}
	r := closedLoop(conns, warmup, duration, pid, func(w int) error {
		err := cs[w].get()
		if err != nil { // reconnect, so that one error does not end the worker
			cs[w].c.Close()
			if c, derr := net.Dial("tcp", addr); derr == nil {
				cs[w].c, cs[w].br = c, bufio.NewReader(c)
			}
		}
		return err
	})
	st := summarize(r.samples)
	rec := smallRecord(int64(r.completed), r.window, r.errors, st.p50, st.p90, st.p99, r.clientCPU, 0, r.daemonCPU, 0, r.daemonCSW)
	if r.firstErr != nil {
		rec["first_error"] = r.firstErr.Error()
	}
	return rec, nil
}
