package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Commands on sandboxd.v1.Processes: processes that outlive sbx.

// detailCode is sbx's exit status for a spawned process's exit: its code, or 128 + the signal.
func detailCode(e *sandboxd.ExitDetail) int {
	if e == nil {
		return 0
	}
	if e.Code < 0 && e.Signal > 0 {
		return 128 + e.Signal
	}
	return exitCode(e.Code)
}

func processID(fs *flag.FlagSet, args []string) (int32, error) {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "sbx %s: want one process id\n", fs.Name())
		return 0, errUsage
	}
	id, err := strconv.ParseInt(args[0], 10, 32)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%q is not a process id", args[0])
	}
	return int32(id), nil
}

func cmdRun(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	tag := fs.String("tag", "", "a label for ps --tag")
	stdin := fs.Bool("i", false, "keep stdin open (sbx attach -i feeds it)")
	tty := fs.Bool("t", false, "run on a terminal (24x80)")
	dir := fs.String("w", "", "working directory in the sandbox")
	timeout := fs.Duration("timeout", 0, "SIGTERM to its tree after this long, SIGKILL after --grace")
	grace := fs.Duration("grace", 0, "between the timeout's SIGTERM and SIGKILL (daemon default 5s)")
	seccomp := fs.String("seccomp", "", "seccomp profile: default or off (default: the daemon's)")
	var env multi
	fs.Var(&env, "e", "KEY=VALUE added to the environment (repeatable)")
	rest, err := parse(fs, g, args, false)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		fmt.Fprintln(os.Stderr, "sbx run: no command")
		return errUsage
	}
	opts, err := procOpts(env, *dir, *tty)
	if err != nil {
		return err
	}
	opts = append(opts, sandboxd.Tag(*tag))
	if *stdin {
		opts = append(opts, sandboxd.OpenStdin())
	}
	if *tty {
		opts = append(opts, sandboxd.PTY(24, 80))
	}
	if *timeout > 0 {
		opts = append(opts, sandboxd.Timeout(*timeout))
	}
	if *grace > 0 {
		opts = append(opts, sandboxd.Grace(*grace))
	}
	if *seccomp != "" {
		opts = append(opts, sandboxd.Seccomp(*seccomp))
	}
	return withClient(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		p, err := c.Spawn(ctx, rest, opts...)
		if err != nil {
			return err
		}
		if g.json() {
			printJSON(p.Info)
		} else {
			fmt.Println(p.ID)
		}
		return nil
	})
}

func cmdPs(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("ps", flag.ContinueOnError)
	tag := fs.String("tag", "", "only processes with this tag")
	if rest, err := parse(fs, g, args, true); err != nil || len(rest) != 0 {
		return errUsage
	}
	return withClient(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		list, err := c.ListProcesses(ctx, *tag)
		if err != nil {
			return err
		}
		if g.json() {
			printJSON(map[string]any{"processes": list})
			return nil
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPID\tSTATE\tEXIT\tTAG\tOUTPUT\tCOMMAND")
		for _, p := range list {
			exit := ""
			if p.Exit != nil {
				exit = fmt.Sprintf("%d %s", p.Exit.Code, p.Exit.Reason)
				if p.Exit.Signal != 0 {
					exit = fmt.Sprintf("sig %d %s", p.Exit.Signal, p.Exit.Reason)
				}
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%d/%d\t%s\n", p.ID, p.PID, p.State, exit, p.Tag,
				p.Stdout.End, p.Stderr.End, strings.Join(p.Command, " "))
		}
		return tw.Flush()
	})
}

// cmdLogs prints a spawned process's output from offsets (-f: following it until it exits);
// attach is logs -f with stdin forwarded and the exit status passed through.
func cmdLogs(ctx context.Context, g *globals, args []string) error {
	return logs(ctx, g, args, "logs")
}

func cmdAttach(ctx context.Context, g *globals, args []string) error {
	return logs(ctx, g, args, "attach")
}

func logs(ctx context.Context, g *globals, args []string, name string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	follow := fs.Bool("f", name == "attach", "follow new output until the process exits")
	from := fs.Uint64("from", 0, "stdout offset to start from")
	errFrom := fs.Uint64("stderr-from", 0, "stderr offset to start from (default: --from)")
	stdin := fs.Bool("i", false, "forward sbx's stdin to the process (attach)")
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	id, err := processID(fs, rest)
	if err != nil {
		return err
	}
	if *errFrom == 0 {
		*errFrom = *from
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	p := c.Process(id)
	opts := []sandboxd.AttachOption{sandboxd.FromOffsets(*from, *errFrom)}
	if !*follow {
		opts = append(opts, sandboxd.NoFollow())
	}
	a, err := p.Attach(ctx, opts...)
	if err != nil {
		return err
	}
	defer a.Close()
	if *stdin {
		go forwardSpawnedStdin(ctx, p)
	}
	if g.json() {
		return logsJSON(a)
	}
	gap := func(ev sandboxd.AttachEvent) {
		fmt.Fprintf(os.Stderr, "sbx: %d bytes of %s dropped before they were read (offsets %d-%d)\n",
			ev.To-ev.From, ev.Stream, ev.From, ev.To)
	}
	exit, err := a.Copy(os.Stdout, os.Stderr, gap)
	if err != nil {
		return err
	}
	if name == "attach" {
		return exitError{detailCode(exit)}
	}
	return nil
}

func logsJSON(a *sandboxd.Attachment) error {
	var out, errb strings.Builder
	var gaps []map[string]any
	exit, err := a.Copy(&out, &errb, func(ev sandboxd.AttachEvent) {
		gaps = append(gaps, map[string]any{"stream": ev.Stream.String(), "from": ev.From, "to": ev.To})
	})
	if err != nil {
		return err
	}
	doc := map[string]any{"truncated": gaps, "exit": exit}
	text(doc, "stdout", []byte(out.String()))
	text(doc, "stderr", []byte(errb.String()))
	printJSON(doc)
	return nil
}

func forwardSpawnedStdin(ctx context.Context, p *sandboxd.Spawned) {
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if p.Write(ctx, buf[:n], false) != nil {
				return
			}
		}
		if err != nil {
			p.Write(ctx, nil, true)
			return
		}
	}
}

var signalNames = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM,
	"CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP, "WINCH": syscall.SIGWINCH,
}

func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	if sig, ok := signalNames[strings.TrimPrefix(strings.ToUpper(s), "SIG")]; ok {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

func cmdKill(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("kill", flag.ContinueOnError)
	sigName := fs.String("signal", "TERM", "signal name or number")
	tree := fs.Bool("tree", false, "the process and every descendant")
	alone := fs.Bool("process", false, "the process alone (default: its process group)")
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	id, err := processID(fs, rest)
	if err != nil {
		return err
	}
	sig, err := parseSignal(*sigName)
	if err != nil {
		return err
	}
	scope := sandboxd.ScopeGroup
	if *tree {
		scope = sandboxd.ScopeTree
	} else if *alone {
		scope = sandboxd.ScopeProcess
	}
	return withClient(ctx, g, func(ctx context.Context, c *sandboxd.Client) error {
		n, err := c.Process(id).Signal(ctx, sig, scope)
		if err != nil {
			return err
		}
		if g.json() {
			printJSON(map[string]int{"signalled": n})
		}
		return nil
	})
}

func cmdWait(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	id, err := processID(fs, rest)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	exit, err := c.Process(id).Wait(ctx)
	if err != nil {
		return err
	}
	if g.json() {
		printJSON(exit)
	}
	return exitError{detailCode(exit)}
}
