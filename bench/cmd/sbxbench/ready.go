package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "sigs.k8s.io/agent-sandbox/packages/sandboxd/spec/process/v1"
)

// answers reports whether the daemon at addr answers a ProcessService call (any status but
// UNAVAILABLE: the daemon's handler ran). SendSignal to a process id that cannot exist is
// answered by both daemons without side effects.
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	cc, err := dial(addr, 0)
	if err != nil {
		return false
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pb.NewProcessServiceClient(cc).SendSignal(ctx,
		&pb.SendSignalRequest{ProcessId: 1 << 30, Signal: pb.Signal_SIGNAL_SIGTERM}, grpc.WaitForReady(true))
	code := status.Code(err)
	return code != codes.Unavailable && code != codes.DeadlineExceeded
}

// cmdWait: waits until the daemon at -addr answers.
func cmdWait(args []string) error {
	fs := flag.NewFlagSet("wait", flag.ExitOnError)
	addr := fs.String("addr", "", "daemon address host:port")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	fs.Parse(args)
	end := time.Now().Add(*timeout)
	for time.Now().Before(end) {
		if answers(*addr) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer within %v", *addr, *timeout)
}

// cmdFreePort prints n distinct free loopback TCP ports.
func cmdFreePort(args []string) error {
	fs := flag.NewFlagSet("freeport", flag.ExitOnError)
	n := fs.Int("n", 1, "how many")
	fs.Parse(args)
	var ports []string
	for i := 0; i < *n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	fmt.Println(strings.Join(ports, " "))
	return nil
}

func freePorts(n int) ([]string, error) {
	var ports []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

// cmdReady: spawns the daemon given after "--" ({PORT}, {PORT2} and {ROOT} are replaced by two
// free ports and a fresh root dir), times spawn-to-first-answer, lets it idle, reads its memory
// from /proc/PID/status, and stops it. Repeated -runs times.
func cmdReady(args []string) error {
	fs := flag.NewFlagSet("ready", flag.ExitOnError)
	label := fs.String("label", "", "name of the daemon in the report")
	runs := fs.Int("runs", 3, "how many cold starts")
	idle := fs.Duration("idle", time.Second, "idle time between ready and reading the RSS")
	smaps := fs.Bool("smaps", false, "print where the idle RSS is (by mapping) on stderr")
	out := fs.String("out", "", "append the JSON records to this file")
	fs.Parse(args)
	argv := fs.Args()
	if len(argv) == 0 {
		return errors.New("no daemon command after --")
	}
	for run := 0; run < *runs; run++ {
		ports, err := freePorts(2)
		if err != nil {
			return err
		}
		root, err := os.MkdirTemp("", "sbxbench-root-")
		if err != nil {
			return err
		}
		r := strings.NewReplacer("{PORT}", ports[0], "{PORT2}", ports[1], "{ROOT}", root)
		a := make([]string, len(argv))
		for i, s := range argv {
			a[i] = r.Replace(s)
		}
		addr := "127.0.0.1:" + ports[0]
		cmd := exec.Command(a[0], a[1:]...)
		cmd.Stdout, cmd.Stderr = nil, nil // /dev/null: logging to a terminal is not timed
		exited := make(chan error, 1)
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() { exited <- cmd.Wait() }()
		var readyAfter time.Duration
		for {
			select {
			case err := <-exited:
				return fmt.Errorf("%s exited before answering: %v", a[0], err)
			default:
			}
			if answers(addr) {
				readyAfter = time.Since(t0)
				break
			}
			if time.Since(t0) > 30*time.Second {
				cmd.Process.Kill()
				return fmt.Errorf("%s did not answer within 30s", a[0])
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(*idle)
		pid := cmd.Process.Pid
		mem := statusKB(pid, "VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM", "Threads")
		if *smaps && run == 0 {
			printSmaps(pid, *label)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(root)
		rec := map[string]any{
			"kind":        "ready",
			"label":       *label,
			"ready_ms":    round(float64(readyAfter.Microseconds())/1000, 2),
			"rss_kb":      mem["VmRSS"],
			"rss_anon_kb": mem["RssAnon"],
			"rss_file_kb": mem["RssFile"],
			"rss_shm_kb":  mem["RssShmem"],
			"hwm_kb":      mem["VmHWM"],
			"threads":     mem["Threads"],
		}
		fmt.Fprintf(os.Stderr, "  ready  %-6s %8.2f ms to first answer; idle VmRSS %d KiB (anon %d, file %d), %d threads\n",
			*label, rec["ready_ms"], mem["VmRSS"], mem["RssAnon"], mem["RssFile"], mem["Threads"])
		if err := emit(*out, rec); err != nil {
			return err
		}
	}
	return nil
}

// printSmaps sums Rss and Anonymous of /proc/PID/smaps by mapping name, largest first.
func printSmaps(pid int, label string) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return
	}
	defer f.Close()
	type acc struct{ rss, anon int64 }
	by := map[string]*acc{}
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") || strings.Contains(fields[0], "-") {
			// A mapping header: "start-end perms offset dev inode [path]".
			cur = "[anon]"
			if len(fields) >= 6 {
				cur = fields[5]
			}
			if by[cur] == nil {
				by[cur] = &acc{}
			}
			continue
		}
		if len(fields) >= 2 {
			v, _ := strconv.ParseInt(fields[1], 10, 64)
			switch fields[0] {
			case "Rss:":
				by[cur].rss += v
			case "Anonymous:":
				by[cur].anon += v
			}
		}
	}
	names := make([]string, 0, len(by))
	for k := range by {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]].rss > by[names[j]].rss })
	fmt.Fprintf(os.Stderr, "  idle RSS of %s by mapping (KiB, Rss / of which anonymous):\n", label)
	for i, k := range names {
		if i == 12 || by[k].rss == 0 {
			break
		}
		fmt.Fprintf(os.Stderr, "    %7d %7d  %s\n", by[k].rss, by[k].anon, k)
	}
}
