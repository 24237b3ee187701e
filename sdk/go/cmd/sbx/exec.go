package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unicode/utf8"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// exitCode maps a process's exit code to sbx's: -1 (killed by a signal, which process.v1 does
// not name) becomes 255.
func exitCode(code int) int {
	if code < 0 || code > 255 {
		return 255
	}
	return code
}

func cmdExec(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	stdin := fs.Bool("i", false, "forward sbx's stdin to the command")
	tty := fs.Bool("t", false, "give the command a terminal (raw mode when stdin is one)")
	dir := fs.String("w", "", "working directory in the sandbox")
	timeout := fs.Duration("timeout", 0, "kill the command after this long")
	maxOut := fs.Int("max-output", 16<<20, "with --output json: bytes kept per stream")
	seccomp := fs.String("seccomp", "", "seccomp profile: default or off (default: the daemon's)")
	var env multi
	fs.Var(&env, "e", "KEY=VALUE added to the environment (repeatable)")
	rest, err := parse(fs, g, args, false)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		fmt.Fprintln(os.Stderr, "sbx exec: no command")
		return errUsage
	}
	if *seccomp != "" && *tty {
		fmt.Fprintln(os.Stderr, "sbx exec: --seccomp takes no -t (sbx run -t --seccomp P, then sbx attach -i)")
		return errUsage
	}
	opts, err := procOpts(env, *dir, false)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	if *timeout > 0 {
		opts = append(opts, sandboxd.Timeout(*timeout))
	}
	if *seccomp != "" {
		opts = append(opts, sandboxd.Seccomp(*seccomp))
		return execSpawned(ctx, g, c, rest, opts, *stdin, *maxOut)
	}
	if *stdin {
		opts = append(opts, sandboxd.Stdin(os.Stdin))
	}
	if g.json() {
		return execJSON(ctx, c, rest, append(opts, sandboxd.MaxOutput(*maxOut)))
	}
	if *tty {
		return interactive(ctx, c, rest, opts, *stdin)
	}
	p, err := c.Start(ctx, rest, append(opts, sandboxd.Stdout(os.Stdout), sandboxd.Stderr(os.Stderr))...)
	if err != nil {
		return err
	}
	defer p.Close()
	forwardSignals(ctx, p)
	st, err := p.Wait()
	if err != nil {
		return err
	}
	return exitError{exitCode(st.Code)}
}

// execSpawned is exec through sandboxd.v1.Processes, which carries what process.v1 cannot
// (the seccomp profile): Spawn, follow its output, forward stdin and signals, and remove it
// once it has exited; with --output json, one RunProcess call.
func execSpawned(ctx context.Context, g *globals, c *sandboxd.Client, cmd []string, opts []sandboxd.ProcOption, stdin bool, maxOut int) error {
	if g.json() {
		if stdin {
			opts = append(opts, sandboxd.Stdin(os.Stdin))
		}
		r, err := c.RunProcess(ctx, cmd, append(opts, sandboxd.MaxOutput(maxOut))...)
		if err != nil {
			return err
		}
		out := map[string]any{
			"exit_code": r.ExitCode, "process_id": r.ProcessID, "timed_out": r.TimedOut,
			"stdout_truncated": r.StdoutTruncated, "stderr_truncated": r.StderrTruncated, "exit": r.Exit,
		}
		text(out, "stdout", r.Stdout)
		text(out, "stderr", r.Stderr)
		printJSON(out)
		return exitError{detailCode(r.Exit)}
	}
	if stdin {
		opts = append(opts, sandboxd.OpenStdin())
	}
	p, err := c.Spawn(ctx, cmd, opts...)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := bounded(context.Background())
		p.Remove(rctx)
		cancel()
	}()
	a, err := p.Attach(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	if stdin {
		go forwardSpawnedStdin(ctx, p)
	}
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(ch)
	go func() {
		for s := range ch {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			p.Signal(sctx, s.(syscall.Signal), sandboxd.ScopeGroup)
			cancel()
		}
	}()
	exit, err := a.Copy(os.Stdout, os.Stderr, nil)
	if err != nil {
		return err
	}
	return exitError{detailCode(exit)}
}

// procOpts are the options of -e and -w; withTerm adds TERM (sbx's, else xterm) unless given.
func procOpts(env []string, dir string, withTerm bool) ([]sandboxd.ProcOption, error) {
	envMap, err := splitEnv(env)
	if err != nil {
		return nil, err
	}
	if withTerm {
		if envMap == nil {
			envMap = map[string]string{}
		}
		if _, ok := envMap["TERM"]; !ok {
			envMap["TERM"] = envStr("TERM", "xterm")
		}
	}
	opts := []sandboxd.ProcOption{sandboxd.Env(envMap)}
	if dir != "" {
		opts = append(opts, sandboxd.Dir(dir))
	}
	return opts, nil
}

// forwardSignals passes SIGINT and SIGTERM that sbx receives on to the process group.
func forwardSignals(ctx context.Context, p *sandboxd.Process) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range ch {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			p.Signal(sctx, s.(syscall.Signal))
			cancel()
		}
	}()
}

// text returns data as a JSON string field when it is UTF-8, else as name_base64.
func text(out map[string]any, name string, data []byte) {
	if utf8.Valid(data) {
		out[name] = string(data)
	} else {
		out[name+"_base64"] = base64.StdEncoding.EncodeToString(data)
	}
}

func execJSON(ctx context.Context, c *sandboxd.Client, cmd []string, opts []sandboxd.ProcOption) error {
	r, err := c.Run(ctx, cmd, opts...)
	if err != nil {
		return err
	}
	out := map[string]any{
		"exit_code": r.ExitCode, "process_id": r.ProcessID, "timed_out": r.TimedOut,
		"stdout_truncated": r.StdoutTruncated, "stderr_truncated": r.StderrTruncated,
	}
	text(out, "stdout", r.Stdout)
	text(out, "stderr", r.Stderr)
	printJSON(out)
	return exitError{exitCode(r.ExitCode)}
}

// interactive runs cmd on a PTY the size of sbx's terminal: raw mode while it runs, the
// window's size followed (SIGWINCH), stdin forwarded byte for byte, the exit status passed
// through.
func interactive(ctx context.Context, c *sandboxd.Client, cmd []string, opts []sandboxd.ProcOption, forward bool) error {
	fd := int(os.Stdin.Fd())
	cols, rows := windowSize(fd)
	p, err := c.Start(ctx, cmd, append(opts, sandboxd.PTY(uint32(rows), uint32(cols)), sandboxd.Stdout(os.Stdout))...)
	if err != nil {
		return err
	}
	defer p.Close()
	restore, err := localTTY(fd, func(cols, rows int) {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p.Resize(rctx, uint32(rows), uint32(cols))
		cancel()
	})
	if err != nil {
		return err
	}
	defer restore()
	if forward {
		go copyStdin(p, func() { p.CloseStdin() }) // the PTY gets its EOF
	}
	st, err := p.Wait()
	if err != nil {
		return err
	}
	return exitError{exitCode(st.Code)}
}

// copyStdin forwards what is typed as it comes (raw mode: every key, Ctrl-C and Ctrl-D
// included, goes to the terminal in the sandbox) to w; at the end of input it calls eof.
func copyStdin(w io.Writer, eof func()) {
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			eof()
			return
		}
		if err != nil {
			return
		}
	}
}

func cmdShell(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("shell", flag.ContinueOnError)
	shell := fs.String("shell", "/bin/sh", "the shell to run")
	dir := fs.String("w", "", "working directory in the sandbox")
	var env multi
	fs.Var(&env, "e", "KEY=VALUE added to the environment (repeatable)")
	if _, err := parse(fs, g, args, true); err != nil {
		return err
	}
	opts, err := procOpts(env, *dir, true)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	return interactive(ctx, c, []string{*shell}, opts, true)
}
