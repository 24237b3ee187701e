package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/klog/v2"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
	"github.com/sandboxd/sandboxd/sdk/go/k8s"
)

// Commands against a cluster (sdk/go/k8s): claim a sandbox, release it, and --sandbox NAME,
// which finds a sandbox's address and token through the cluster for every other command.

// resolveWait bounds how long --sandbox waits for a sandbox to be Ready.
const resolveWait = 2 * time.Minute

func (g *globals) kube() (*k8s.Client, error) {
	tc, err := g.routerTLS()
	if err != nil {
		return nil, err
	}
	return k8s.New(k8s.Config{Kubeconfig: g.kubeconfig, Context: g.kubeContext, Namespace: g.namespace,
		Connect: g.connect, Router: g.router, RouterTLS: tc})
}

// routerTLS trusts --router-ca alone when it is given (nil: the system's roots).
func (g *globals) routerTLS() (*tls.Config, error) {
	if g.routerCA == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(g.routerCA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--router-ca %s: no PEM certificate in it", g.routerCA)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// routerClient is a client through --router: of the sandbox --sandbox names, found through
// the cluster (its claim's sandbox, its token), or of --sandbox-id with the routing keys
// given, without the cluster.
func (g *globals) routerClient() (*sandboxd.Client, error) {
	switch {
	case g.router == "":
		return nil, fmt.Errorf("--sandbox-id goes with --router URL")
	case (g.sandbox == "") == (g.sandboxID == ""):
		return nil, fmt.Errorf("--router wants --sandbox NAME (through the cluster) or --sandbox-id NAME")
	case g.sandbox != "":
		return g.routerLease()
	}
	tc, err := g.routerTLS()
	if err != nil {
		return nil, err
	}
	r, err := sandboxd.NewRouter(g.router, sandboxd.WithToken(g.token), sandboxd.WithTLSConfig(tc))
	if err != nil {
		return nil, err
	}
	opts := []sandboxd.Option{sandboxd.WithNamespace(g.namespace), sandboxd.WithPodIP(g.podIP),
		sandboxd.WithUID(g.uid)}
	if g.grpcPortSet {
		opts = append(opts, sandboxd.WithGRPCPort(g.grpcPort))
	}
	if g.restPortSet {
		opts = append(opts, sandboxd.WithRESTPort(g.restPort))
	}
	// The router's connection lives as long as sbx does.
	return r.Sandbox(g.sandboxID, opts...)
}

// routerLease finds the sandbox of --sandbox through the cluster and connects to it through
// the router, by its name, with its token.
func (g *globals) routerLease() (*sandboxd.Client, error) {
	if g.connect != k8s.ConnectAuto && g.connect != k8s.ConnectRouter {
		return nil, fmt.Errorf("--router goes with --connect router (or auto), not %q", g.connect)
	}
	kc, err := g.kube()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveWait)
	defer cancel()
	l, err := findLease(ctx, kc, g.sandbox)
	if err != nil {
		return nil, err
	}
	if err := l.WaitReady(ctx); err != nil {
		return nil, err
	}
	return l.Connect()
}

// findLease is the claim called name, else the Sandbox called name.
func findLease(ctx context.Context, kc *k8s.Client, name string) (*k8s.Lease, error) {
	l, err := kc.Get(ctx, k8s.KindClaim, name)
	if errors.Is(err, sandboxd.ErrNotFound) {
		l, err = kc.Get(ctx, k8s.KindSandbox, name)
	}
	if errors.Is(err, sandboxd.ErrNotFound) {
		return nil, &sandboxd.Error{Code: "NOT_FOUND",
			Message: fmt.Sprintf("no SandboxClaim or Sandbox %q in namespace %q", name, kc.Namespace())}
	}
	return l, err
}

// resolveSandbox points g's connection at the sandbox --sandbox names: its pod IP and
// sandboxd ports (or local ports forwarded to them through the API server, as --connect
// says; they close when sbx exits) and the token of its Secret.
func (g *globals) resolveSandbox() error {
	kc, err := g.kube()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveWait)
	defer cancel()
	l, err := findLease(ctx, kc, g.sandbox)
	if err != nil {
		return err
	}
	if err := l.WaitReady(ctx); err != nil {
		return err
	}
	// client-go logs the end of each forwarded connection through klog; sbx reports its own
	// errors.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	host, grpcPort, restPort, err := l.Endpoint(ctx)
	if err != nil {
		return err
	}
	g.host, g.grpcPort, g.restPort, g.token, g.socket = host, grpcPort, restPort, l.Token, ""
	return nil
}

func cmdClaim(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("claim", flag.ContinueOnError)
	pool := fs.String("pool", "", "the SandboxWarmPool to claim from")
	template := fs.String("template", "", "or a SandboxTemplate: its pool's sandbox if it has one, else a Sandbox of it")
	name := fs.String("name", "", "the claim's (or Sandbox's) name (default: generated)")
	wait := fs.Bool("wait", false, "wait until it is Ready; print its address")
	timeout := fs.Duration("timeout", resolveWait, "with --wait: how long at most")
	var env multi
	fs.Var(&env, "e", "KEY=VALUE for the sandbox's containers (repeatable; starts a sandbox of its own; the template must allow it: envVarsInjectionPolicy)")
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 || (*pool == "") == (*template == "") || (*template != "" && len(env) > 0) {
		fmt.Fprintln(os.Stderr, "sbx claim: want --pool P or --template T (-e only with --pool)")
		return errUsage
	}
	envMap, err := splitEnv(env)
	if err != nil {
		return err
	}
	kc, err := g.kube()
	if err != nil {
		return err
	}
	cctx, cancel := bounded(ctx)
	defer cancel()
	var l *k8s.Lease
	if *pool != "" {
		l, err = kc.Claim(cctx, *pool, k8s.Name(*name), k8s.Env(envMap))
	} else {
		l, err = kc.CreateSandbox(cctx, *template, *name)
	}
	if err != nil {
		return err
	}
	if *wait {
		wctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		if err := l.WaitReady(wctx); err != nil {
			// Nothing is left behind for a script that gave up.
			dctx, cancel := bounded(context.Background())
			defer cancel()
			l.Delete(dctx)
			return err
		}
	}
	if g.json() {
		printJSON(l)
	} else if *wait {
		fmt.Printf("%s\t%s\t%s\n", l.Name, l.Sandbox, l.Address())
	} else {
		fmt.Println(l.Name)
	}
	return nil
}

func cmdRelease(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	wait := fs.Bool("wait", false, "wait until it is gone")
	rest, err := parse(fs, g, args, true)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		fmt.Fprintln(os.Stderr, "sbx release: want claim or sandbox names")
		return errUsage
	}
	kc, err := g.kube()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, resolveWait)
	defer cancel()
	var released []map[string]string
	for _, name := range rest {
		l, err := findLease(ctx, kc, name)
		if err != nil {
			return err
		}
		if err := l.Delete(ctx); err != nil {
			return err
		}
		if *wait {
			if err := l.WaitDeleted(ctx); err != nil {
				return err
			}
		}
		released = append(released, map[string]string{"kind": string(l.Kind), "name": l.Name})
	}
	if g.json() {
		printJSON(map[string]any{"released": released})
	}
	return nil
}
