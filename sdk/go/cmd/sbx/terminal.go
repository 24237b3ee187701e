package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"golang.org/x/term"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// cmdTerminal is a terminal over the daemon's WebSocket: a new login shell (or COMMAND through
// sh -lc), or with --pid the terminal of a spawned process. The local terminal is in raw mode
// while it runs, its size followed (SIGWINCH); sbx exits with the process's status. A lost
// connection leaves the process running and says how to resume.
func cmdTerminal(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("terminal", flag.ContinueOnError)
	pid := fs.Int("pid", 0, "attach to the terminal of this spawned process (sbx run -t) instead of a new shell")
	offset := fs.Int64("offset", -1, "with --pid: its output from this byte offset (default: the last 50 lines)")
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	opts := sandboxd.TerminalOptions{Command: shellJoin(rest)}
	if *pid != 0 && len(rest) > 0 {
		fmt.Fprintln(os.Stderr, "sbx terminal: --pid takes no command")
		return errUsage
	}
	if *offset >= 0 && *pid == 0 {
		fmt.Fprintln(os.Stderr, "sbx terminal: --offset needs --pid")
		return errUsage
	}
	fd := int(os.Stdin.Fd())
	cols, rows := windowSize(fd)
	if *pid != 0 {
		opts = sandboxd.TerminalOptions{PID: int32(*pid)}
		if *offset >= 0 {
			off := uint64(*offset)
			opts.Offset = &off
		}
	} else {
		opts.Cols, opts.Rows = cols, rows
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	t, err := c.Terminal(ctx, opts)
	if err != nil {
		return err
	}
	defer t.Close()
	restore, err := localTTY(fd, func(cols, rows int) { t.Resize(cols, rows) })
	if err != nil {
		return err
	}
	defer restore()
	if *pid != 0 && term.IsTerminal(fd) {
		t.Resize(cols, rows) // an attached terminal takes this window's size, as tmux attach does
	}
	// Stdin as it comes; at its end, the terminal's EOF character (Ctrl-D), as exec -t gives.
	go copyStdin(t, func() { t.Write([]byte{4}) })
	go func() {
		<-ctx.Done() // SIGTERM: the connection goes, the process stays
		t.Close()
	}()
	if _, err := io.Copy(os.Stdout, t); err != nil {
		// In raw mode still (\r\n); main prints the error after, the terminal restored.
		fmt.Fprintf(os.Stderr, "\r\nsbx: terminal %d left at offset %d, the process goes on: sbx terminal --pid %d --offset %d resumes\r\n",
			t.ID(), t.Offset(), t.ID(), t.Offset())
		return err
	}
	return exitError{detailCode(t.Exit())}
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellJoin quotes an argv into the one line the daemon runs with sh -lc.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if plainWord.MatchString(a) {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
