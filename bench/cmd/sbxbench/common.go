package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// dial opens one client connection. window > 0 sets a fixed HTTP/2 flow-control window (which
// turns grpc-go's BDP estimation off); 0 keeps grpc-go's defaults, as a real client would.
func dial(addr string, window int32) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}
	if window > 0 {
		opts = append(opts, grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window))
	}
	opts = append(opts, routeDialOptions()...)
	return grpc.NewClient("passthrough:///"+addr, opts...)
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat (100 on Linux).
const clockTicks = 100

// procCPU returns the user+system CPU seconds that process pid has used, all its threads
// included (dead ones too), or -1 when it cannot be read.
func procCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may hold spaces
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (ut + st) / clockTicks
}

// selfCPU returns this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// statusKB returns the named fields (VmRSS, RssAnon, ...) of /proc/PID/status in KiB.
func statusKB(pid int, names ...string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, n := range names {
			if k == n {
				f := strings.Fields(v)
				if len(f) > 0 {
					x, _ := strconv.ParseInt(f[0], 10, 64)
					out[n] = x
				}
			}
		}
	}
	return out
}

// us converts a duration to microseconds rounded to 0.1 µs, the unit of every latency sample.
func us(d time.Duration) float64 {
	return math.Round(float64(d.Nanoseconds())/100) / 10
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// jnum keeps NaN (no samples) out of JSON, which cannot hold it: null instead.
func jnum(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return x
}

// procCtxSwitches returns the context switches (voluntary + involuntary) of every live thread of
// process pid, or -1: each is a thread going to sleep or being preempted, so their count per call
// tells how many thread hand-offs a call costs the daemon.
func procCtxSwitches(pid int) int64 {
	if pid <= 0 {
		return -1
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return -1
	}
	var n int64
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		for _, v := range statusKBtask(pid, tid) {
			n += v
		}
	}
	return n
}

func statusKBtask(pid, tid int) []int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return nil
	}
	var out []int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
			x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			out = append(out, x)
		}
	}
	return out
}
