// Command sbx drives a sandboxd from the command line: run commands, copy files and trees both
// ways, list and stat paths, and open an interactive shell; against a cluster, claim and
// release sandboxes and reach one by name. Installed as kubectl-sandbox on PATH, it is the
// kubectl plugin `kubectl sandbox` (the same commands).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

const usage = `usage: PROG [connection flags] COMMAND [flags] [args]

commands:
  exec [-i] [-t] [-e K=V]... [-w DIR] [--timeout D] [--seccomp default|off] -- CMD [ARGS...]
                       run a command; its output streams, its exit status is sbx's
  shell [--shell CMD]  an interactive shell on a terminal (raw mode, resized with the window)
  terminal [--pid N [--offset N]] [-- COMMAND...]
                       a terminal over WebSocket: a login shell (or COMMAND), or the
                       terminal of spawned process N; closing it leaves the process running
  cp SRC DST           copy a file or a directory tree; the sandbox side is written :PATH
  ls [PATH]            list a directory
  stat PATH            describe a path
  mkdir [-p] PATH      create a directory
  rm [-r] PATH         remove a path
  mv [-f] FROM TO      move a path within the sandbox
  watch [-r] [--include G]... [--exclude G]... [--count N] [--resume ID --since N] [PATH]
                       print changes beneath a directory as they come (a line each)

processes that outlive sbx (sandboxd.v1.Processes):
  run [-i] [-t] [--tag T] [-e K=V]... [-w DIR] [--timeout D] [--grace D] [--seccomp P]
      -- CMD [ARGS...]
                       start a process in the background; prints its id
  ps [--tag T]         list them: state, exit detail, output written
  logs [-f] [--from N] [--stderr-from N] ID
                       its output from byte offsets (-f: follow until it exits)
  attach [-i] ID       follow its output (-i: feed its stdin); exits with its status
  kill [--signal SIG] [--tree|--process] ID
                       any signal to its group (default), the process, or its whole tree
  wait ID              wait for it; exits with its status (128 + signal when killed)

sandboxes of a cluster (SandboxClaim, Sandbox; kubeconfig or in-cluster):
  claim --pool P | --template T [--name N] [-e K=V]... [--wait] [--timeout D]
                       claim one from a warm pool (or make one of a template); prints its
                       name (--wait: once Ready, with its sandbox and address)
  release [--wait] NAME...
                       delete claims (their sandboxes go with them) or sandboxes

connection flags (also after the command), with their environment defaults:
  --host HOST          sandboxd's host ($SBX_HOST, 127.0.0.1)
  --grpc-port N        gRPC port ($SBX_GRPC_PORT, 9090)
  --rest-port N        REST port ($SBX_REST_PORT, 8080)
  --socket PATH        gRPC through this unix socket ($SBX_SOCKET)
  --token TOKEN        bearer token ($SANDBOXD_TOKEN)
  --output text|json   json prints one JSON document for scripts
  --sandbox NAME       the sandbox of this claim (or this Sandbox) in the cluster: its pod
                       IP, sandboxd ports and token instead of the flags above ($SBX_SANDBOX)
  --connect MODE       how --sandbox reaches sandboxd ($SBX_CONNECT): pod-ip, port-forward
                       (local ports through the API server, from outside the cluster) or
                       auto (default: the pod IP in a pod or when it answers, else a
                       port-forward)
  --namespace NS       the cluster's namespace ($SBX_NAMESPACE, else the kubeconfig's)
  --kubeconfig PATH    ($KUBECONFIG, ~/.kube/config, else in-cluster)
  --context NAME       the kubeconfig's context
  --router URL         reach sandboxd through this sandboxd-router ($SANDBOXD_ROUTER): with
                       --sandbox, the claim's sandbox and token found through the cluster;
                       with --sandbox-id, no cluster at all
  --router-ca FILE     the CA (PEM) an https:// router's certificate is checked against
  --sandbox-id NAME    the sandbox's name as the router routes it (X-Sandbox-ID), in
                       --namespace (default "default"); --grpc-port/--rest-port, when
                       given, go as its X-Sandbox-Port, --pod-ip and --uid as
                       X-Sandbox-Pod-IP and X-Sandbox-UID
`

// globals are the flags every command takes.
type globals struct {
	host     string
	grpcPort int
	restPort int
	socket   string
	token    string
	output   string
	// the cluster, for claim, release and --sandbox
	sandbox, namespace, kubeconfig, kubeContext, connect string
	// a sandboxd-router, and the routing keys of --sandbox-id
	router, routerCA, sandboxID, podIP, uid string
	grpcPortSet, restPortSet                bool
}

// portVar is a port flag that remembers it was given (through a router, only a port given
// is sent: else the router finds sandboxd's).
type portVar struct {
	n   *int
	set *bool
}

func (p portVar) String() string {
	if p.n == nil {
		return ""
	}
	return strconv.Itoa(*p.n)
}

func (p portVar) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("not a port: %q", v)
	}
	*p.n, *p.set = n, true
	return nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func newGlobals() *globals {
	return &globals{
		host: envStr("SBX_HOST", "127.0.0.1"), grpcPort: envInt("SBX_GRPC_PORT", 9090),
		restPort: envInt("SBX_REST_PORT", 8080), socket: os.Getenv("SBX_SOCKET"),
		token: os.Getenv("SANDBOXD_TOKEN"), output: "text",
		sandbox: os.Getenv("SBX_SANDBOX"), namespace: os.Getenv("SBX_NAMESPACE"),
		connect: envStr("SBX_CONNECT", "auto"), router: os.Getenv("SANDBOXD_ROUTER"),
		grpcPortSet: os.Getenv("SBX_GRPC_PORT") != "", restPortSet: os.Getenv("SBX_REST_PORT") != "",
	}
}

// register adds the connection flags to fs, their defaults what g holds already (the
// environment, or flags given before the command).
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.host, "host", g.host, "sandboxd host")
	fs.Var(portVar{&g.grpcPort, &g.grpcPortSet}, "grpc-port", "gRPC port")
	fs.Var(portVar{&g.restPort, &g.restPortSet}, "rest-port", "REST port")
	fs.StringVar(&g.socket, "socket", g.socket, "gRPC unix socket")
	fs.StringVar(&g.token, "token", g.token, "bearer token")
	fs.StringVar(&g.output, "output", g.output, "text or json")
	fs.StringVar(&g.sandbox, "sandbox", g.sandbox, "claim or Sandbox to connect to, through the cluster")
	fs.StringVar(&g.namespace, "namespace", g.namespace, "the cluster's namespace")
	fs.StringVar(&g.connect, "connect", g.connect, "auto, pod-ip or port-forward (with --sandbox)")
	fs.StringVar(&g.kubeconfig, "kubeconfig", g.kubeconfig, "kubeconfig file")
	fs.StringVar(&g.kubeContext, "context", g.kubeContext, "kubeconfig context")
	fs.StringVar(&g.router, "router", g.router, "a sandboxd-router's URL")
	fs.StringVar(&g.routerCA, "router-ca", g.routerCA, "CA file of an https:// router")
	fs.StringVar(&g.sandboxID, "sandbox-id", g.sandboxID, "the sandbox's name, through --router")
	fs.StringVar(&g.podIP, "pod-ip", g.podIP, "the sandbox's pod IP, through --router")
	fs.StringVar(&g.uid, "uid", g.uid, "the sandbox pod's UID, through --router")
}

func (g *globals) client() (*sandboxd.Client, error) {
	if g.output != "text" && g.output != "json" {
		return nil, fmt.Errorf("--output must be text or json, not %q", g.output)
	}
	if g.router != "" || g.sandboxID != "" {
		return g.routerClient()
	}
	if g.sandbox != "" {
		if err := g.resolveSandbox(); err != nil {
			return nil, err
		}
	}
	opts := []sandboxd.Option{sandboxd.WithGRPCPort(g.grpcPort), sandboxd.WithRESTPort(g.restPort),
		sandboxd.WithToken(g.token)}
	if g.socket != "" {
		opts = append(opts, sandboxd.WithUnixSocket(g.socket))
	}
	return sandboxd.New(g.host, opts...)
}

func (g *globals) json() bool { return g.output == "json" }

// exitError carries the exit status sbx must end with.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

type command func(ctx context.Context, g *globals, args []string) error

var commands = map[string]command{
	"exec": cmdExec, "shell": cmdShell, "terminal": cmdTerminal, "cp": cmdCp, "ls": cmdLs, "stat": cmdStat,
	"mkdir": cmdMkdir, "rm": cmdRm, "mv": cmdMv, "watch": cmdWatch,
	"run": cmdRun, "ps": cmdPs, "logs": cmdLogs, "attach": cmdAttach, "kill": cmdKill,
	"wait": cmdWait, "claim": cmdClaim, "release": cmdRelease,
}

// prog is what sbx is called: "kubectl sandbox" when kubectl runs it as its plugin.
func prog() string {
	if filepath.Base(os.Args[0]) == "kubectl-sandbox" {
		return "kubectl sandbox"
	}
	return "sbx"
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	g := newGlobals()
	top := flag.NewFlagSet("sbx", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	g.register(top)
	if err := top.Parse(args); err != nil || top.NArg() == 0 {
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sbx:", err)
		}
		fmt.Fprint(os.Stderr, strings.Replace(usage, "PROG", prog(), 1))
		return 2
	}
	name, rest := top.Arg(0), top.Args()[1:]
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "sbx: unknown command %q\n%s", name, strings.Replace(usage, "PROG", prog(), 1))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := cmd(ctx, g, rest)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, errUsage):
		return 2
	}
	report(g, err)
	return 1
}

var errUsage = errors.New("usage")

// report prints an error: "sbx: CODE: message" on stderr, or with --output json a JSON
// document {"error": {"code", "message"}} on stdout.
func report(g *globals, err error) {
	var se *sandboxd.Error
	code, msg := "ERROR", err.Error()
	if errors.As(err, &se) {
		code, msg = se.Code, se.Message
	}
	if g.json() {
		printJSON(map[string]any{"error": map[string]string{"code": code, "message": msg}})
		return
	}
	if se != nil {
		fmt.Fprintf(os.Stderr, "sbx: %s: %s\n", code, msg)
	} else {
		fmt.Fprintln(os.Stderr, "sbx:", msg)
	}
}

func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// parse parses a command's flags, the connection flags included. With interleave, flags may
// stand between positional arguments (until a "--"); without, the first positional argument
// ends them (exec: the rest is the command and its own flags).
func parse(fs *flag.FlagSet, g *globals, args []string, interleave bool) ([]string, error) {
	g.register(fs)
	fs.SetOutput(os.Stderr)
	if !interleave {
		if err := fs.Parse(args); err != nil {
			return nil, errUsage
		}
		return fs.Args(), nil
	}
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 60*time.Second)
}

// withClient runs fn with a client and a context bounded to a minute (the commands whose
// calls are short).
func withClient(ctx context.Context, g *globals, fn func(context.Context, *sandboxd.Client) error) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := bounded(ctx)
	defer cancel()
	return fn(ctx, c)
}

func splitEnv(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env wants KEY=VALUE, not %q", kv)
		}
		env[k] = v
	}
	return env, nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
