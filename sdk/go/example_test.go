package sandboxd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Getting started (go test runs it against a real daemon; SANDBOXD_GRPC_PORT and
// SANDBOXD_REST_PORT name its ports).
func Example() {
	grpcPort, _ := strconv.Atoi(os.Getenv("SANDBOXD_GRPC_PORT"))
	restPort, _ := strconv.Atoi(os.Getenv("SANDBOXD_REST_PORT"))
	c, err := sandboxd.New("127.0.0.1", sandboxd.WithGRPCPort(grpcPort), sandboxd.WithRESTPort(restPort))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	// Run a command to completion.
	res, err := c.Run(ctx, []string{"sh", "-c", "echo $((6 * 7))"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("run: %d %s", res.ExitCode, res.Stdout)

	// Start a process, feed its stdin, stream its output to a writer.
	var out strings.Builder
	p, err := c.Start(ctx, sandboxd.Shell("while read l; do echo \"echo: $l\"; done"),
		sandboxd.Stdin(strings.NewReader("hello\n")), sandboxd.Stdout(&out))
	if err != nil {
		panic(err)
	}
	st, err := p.Wait()
	fmt.Printf("stream: %sexit: %d %v\n", out.String(), st.Code, err)

	// Files, streamed both ways.
	if _, err := c.Upload(ctx, "example/data.txt", strings.NewReader("some data\n")); err != nil {
		panic(err)
	}
	info, _ := c.Stat(ctx, "example/data.txt")
	fmt.Println("stat:", info.Size)
	var sb strings.Builder
	c.Download(ctx, "example/data.txt", &sb)
	fmt.Print("download: ", sb.String())

	// Errors carry the daemon's code.
	_, err = c.Stat(ctx, "example/missing")
	fmt.Println("not found:", errors.Is(err, sandboxd.ErrNotFound))
	c.Remove(ctx, "example", sandboxd.Recursive())
	// Output:
	// run: 0 42
	// stream: echo: hello
	// exit: 0 <nil>
	// stat: 10
	// download: some data
	// not found: true
}

// Processes that outlive the client (sandboxd.v1.Processes).
func ExampleClient_Spawn() {
	grpcPort, _ := strconv.Atoi(os.Getenv("SANDBOXD_GRPC_PORT"))
	restPort, _ := strconv.Atoi(os.Getenv("SANDBOXD_REST_PORT"))
	c, _ := sandboxd.New("127.0.0.1", sandboxd.WithGRPCPort(grpcPort), sandboxd.WithRESTPort(restPort))
	defer c.Close()
	ctx := context.Background()

	job, err := c.Spawn(ctx, sandboxd.Shell("echo step 1; echo step 2; read x; echo done $x"),
		sandboxd.Tag("example"), sandboxd.OpenStdin())
	if err != nil {
		panic(err)
	}
	// Anyone can find it again, read from any offset, and feed it.
	same := c.Process(job.ID)
	a, _ := same.Attach(ctx) // follows: first the two steps
	var seen strings.Builder
	for !strings.Contains(seen.String(), "step 2") {
		ev, err := a.Next()
		if err != nil {
			panic(err)
		}
		seen.Write(ev.Data)
	}
	a.Close()
	same.Write(ctx, []byte("now\n"), true)
	exit, _ := same.Wait(ctx)
	fmt.Println("exit:", exit.Code, exit.Reason)
	a, _ = same.Attach(ctx, sandboxd.FromOffsets(7, 0)) // from the second line on
	var rest strings.Builder
	a.Copy(&rest, nil, nil)
	fmt.Print(rest.String())
	same.Remove(ctx)
	// Output:
	// exit: 0 exited
	// step 2
	// done now
}

// A terminal over WebSocket: a command in a new one, typed into, then found again by its
// process id from an offset.
func ExampleClient_Terminal() {
	grpcPort, _ := strconv.Atoi(os.Getenv("SANDBOXD_GRPC_PORT"))
	restPort, _ := strconv.Atoi(os.Getenv("SANDBOXD_REST_PORT"))
	c, _ := sandboxd.New("127.0.0.1", sandboxd.WithGRPCPort(grpcPort), sandboxd.WithRESTPort(restPort))
	defer c.Close()
	ctx := context.Background()

	// Without a Command: a login shell.
	t, err := c.Terminal(ctx, sandboxd.TerminalOptions{Command: "stty size; read name; echo hello $name", Cols: 100, Rows: 30})
	if err != nil {
		panic(err)
	}
	defer t.Close() // the process goes on
	size := make([]byte, 8)
	if _, err := io.ReadFull(t, size); err != nil {
		panic(err)
	}
	afterSize := t.Offset() // of the next byte Read returns
	t.Write([]byte("world\n"))
	rest, _ := io.ReadAll(t) // until the process exits
	fmt.Printf("%q %q exit: %d %s\n", size, rest, t.Exit().Code, t.Exit().Reason)

	again, err := c.Terminal(ctx, sandboxd.TerminalOptions{PID: t.ID(), Offset: &afterSize})
	if err != nil {
		panic(err)
	}
	defer again.Close()
	replay, _ := io.ReadAll(again)
	fmt.Printf("%q\n", replay)
	// Output:
	// "30 100\r\n" "world\r\nhello world\r\n" exit: 0 exited
	// "world\r\nhello world\r\n"
}
