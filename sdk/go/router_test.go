package sandboxd_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
	"github.com/sandboxd/sandboxd/sdk/go/internal/testdaemon"
)

// Router and its Clients against a real sandboxd-router with real sandboxd daemons behind
// it, routed by X-Sandbox-Pod-IP to loopback (--allow-loopback-pod-ip).

func startRouter(t *testing.T, extra ...string) *testdaemon.Daemon {
	t.Helper()
	bin, why := testdaemon.RouterBinary()
	if bin == "" {
		t.Skip(why)
	}
	r, err := testdaemon.StartRouter(bin, t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func routerURL(r *testdaemon.Daemon) string { return fmt.Sprintf("http://127.0.0.1:%d", r.Port) }

// routed is a Client of d through the router connection rc.
func routed(t *testing.T, rc *sandboxd.Router, name string, d *daemon, opts ...sandboxd.Option) *sandboxd.Client {
	t.Helper()
	opts = append([]sandboxd.Option{sandboxd.WithPodIP("127.0.0.1"), sandboxd.WithGRPCPort(d.GRPCPort),
		sandboxd.WithRESTPort(d.RESTPort)}, opts...)
	c, err := rc.Sandbox(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newRouter(t *testing.T, r *testdaemon.Daemon) *sandboxd.Router {
	t.Helper()
	rc, err := sandboxd.NewRouter(routerURL(r), sandboxd.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

func rootOf(t *testing.T, c *sandboxd.Client) string {
	t.Helper()
	res, err := c.Run(ctx(t), []string{"pwd"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := filepath.EvalSymlinks(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func realRoot(t *testing.T, d *daemon) string {
	p, err := filepath.EvalSymlinks(d.Root)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRouterProcesses(t *testing.T) {
	r := startRouter(t)
	c := routed(t, newRouter(t, r), "sb", shared)
	res, err := c.Execute(ctx(t), sandboxd.Shell("echo out; echo err >&2; exit 3"))
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("execute: %+v %v", res, err)
	}
	if got := rootOf(t, c); got != realRoot(t, shared) {
		t.Fatalf("pwd %q, want the daemon's root", got)
	}
	// A streaming Start fed on its stdin.
	p, err := c.Start(ctx(t), sandboxd.Shell("while read l; do echo got-$l; done"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	ev, err := p.Next()
	if err != nil || string(ev.Data) != "got-one\n" {
		t.Fatalf("next: %q %v", ev.Data, err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("wait: %v %v", st, err)
	}
	// 8 MiB of output, whole.
	n := 8 << 20
	big, err := c.Run(ctx(t), []string{"head", "-c", fmt.Sprint(n), "/dev/zero"}, sandboxd.MaxOutput(n))
	if err != nil || len(big.Stdout) != n || big.StdoutTruncated {
		t.Fatalf("run: %d bytes, %v", len(big.Stdout), err)
	}
	// sandboxd.v1.Processes.
	s, err := c.Spawn(ctx(t), sandboxd.Shell("exit 4"))
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := s.Wait(ctx(t)); err != nil || ex.Code != 4 {
		t.Fatalf("spawned: %+v %v", ex, err)
	}
}

func TestRouterTwoSandboxesOneConnection(t *testing.T) {
	r := startRouter(t)
	other, err := startDaemon(os.Getenv("SANDBOXD_BIN"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.stop() })
	rc := newRouter(t, r)
	a, b := routed(t, rc, "a", shared), routed(t, rc, "b", other)
	for i := 0; i < 3; i++ {
		if rootOf(t, a) != realRoot(t, shared) || rootOf(t, b) != realRoot(t, other) {
			t.Fatal("a call reached the other sandbox")
		}
	}
	a.Close() // a Router's client leaves the connection to the Router
	if rootOf(t, b) != realRoot(t, other) {
		t.Fatal("b after a closed")
	}
	if n, err := r.Metric(`sandbox_router_connections_total{protocol="h2"}`); err != nil || n != 1 {
		t.Fatalf("client connections %v (%v), want one for both sandboxes", n, err)
	}
	if n, err := r.Metric("sandbox_router_upstream_connections"); err != nil || n != 2 {
		t.Fatalf("upstream connections %v (%v), want one per sandbox", n, err)
	}
}

func TestRouterRefusals(t *testing.T) {
	r := startRouter(t)
	rc := newRouter(t, r)
	if _, err := rc.Sandbox(""); err == nil {
		t.Fatal("no name accepted")
	}
	if _, err := rc.Sandbox("x", sandboxd.WithRESTURL("http://x")); err == nil {
		t.Fatal("an address per sandbox accepted")
	}
	for _, u := range []string{"ftp://r", "http://r/path", "http://"} {
		if _, err := sandboxd.NewRouter(u); err == nil {
			t.Fatalf("router URL %q accepted", u)
		}
	}
	c := routed(t, rc, "Not_A_Label", shared)
	_, err := c.Execute(ctx(t), []string{"true"})
	var se *sandboxd.Error
	if !errors.As(err, &se) || se.Code != "INVALID_ARGUMENT" || se.Message != "Invalid sandbox ID format." {
		t.Fatalf("bad name: %v", err)
	}
	c = routed(t, rc, "sb", shared, sandboxd.WithGRPCPort(1))
	if _, err := c.Execute(ctx(t), []string{"true"}); !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Fatalf("nothing listening: %v", err)
	}
}

// TestRouterToken: the router hands the client's authorization on to sandboxd's own ports only
// (allow-all), those it reaches when the keys name no port, as a client of a cluster's router
// sends them: a sandboxd on 9090 and 8080 at a loopback address of its own.
func TestRouterToken(t *testing.T) {
	r := startRouter(t)
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var d *daemon
	var host string
	var err error
	for i := 0; i < 5 && d == nil; i++ {
		host = fmt.Sprintf("127.%d.%d.%d", 1+mrand.IntN(254), 1+mrand.IntN(254), 2+mrand.IntN(253))
		d, err = startDaemon(os.Getenv("SANDBOXD_BIN"), t.TempDir(), "--listen-host", host,
			"--grpc-port", "9090", "--rest-port", "8080", "--token-file", tf)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	rc := newRouter(t, r)
	for tok, want := range map[string]error{"s3cret": nil, "wrong": sandboxd.ErrUnauthenticated} {
		c, err := rc.Sandbox("sb", sandboxd.WithPodIP(host), sandboxd.WithToken(tok))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Execute(ctx(t), []string{"true"}); !errors.Is(err, want) {
			t.Fatalf("token %q: %v, want %v", tok, err, want)
		}
		if _, err := c.WriteFile(ctx(t), "t.txt", []byte("token")); !errors.Is(err, want) {
			t.Fatalf("token %q over REST: %v, want %v", tok, err, want)
		}
	}
}

func TestRouterFiles(t *testing.T) {
	r := startRouter(t)
	if ok, err := r.ProxiesHTTP(shared.RESTPort); err != nil || !ok {
		t.Skip("this sandboxd-router does not proxy HTTP/1.1 yet (501): files need it")
	}
	c := routed(t, newRouter(t, r), "sb", shared)
	dir := area(t)
	data := make([]byte, 16<<20)
	rand.Read(data)
	want := sha256.Sum256(data)
	up, err := c.Upload(ctx(t), dir+"/f.bin", bytes.NewReader(data))
	if err != nil || up.Size != int64(len(data)) || up.SHA256 != fmt.Sprintf("%x", want) {
		t.Fatalf("upload: %+v %v", up, err)
	}
	var got bytes.Buffer
	if n, err := c.Download(ctx(t), dir+"/f.bin", &got); err != nil || n != int64(len(data)) {
		t.Fatalf("download: %d %v", n, err)
	}
	if sha256.Sum256(got.Bytes()) != want {
		t.Fatal("downloaded bytes differ")
	}
	if _, err := c.Stat(ctx(t), dir+"/missing"); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("stat of a missing file: %v", err)
	}
}

func TestRouterTwoSandboxesOneHTTPConnection(t *testing.T) {
	r := startRouter(t)
	if ok, err := r.ProxiesHTTP(shared.RESTPort); err != nil || !ok {
		t.Skip("this sandboxd-router does not proxy HTTP/1.1 yet (501)")
	}
	other, err := startDaemon(os.Getenv("SANDBOXD_BIN"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.stop() })
	before, err := r.Metric(`sandbox_router_connections_total{protocol="http1"}`)
	if err != nil {
		t.Fatal(err)
	}
	rc := newRouter(t, r)
	a, b := routed(t, rc, "a", shared), routed(t, rc, "b", other)
	name := "who-" + t.Name()
	for i := 0; i < 3; i++ { // each request routed by its own headers on the one connection
		for j, c := range []*sandboxd.Client{a, b} {
			if _, err := c.WriteFile(ctx(t), name, []byte(fmt.Sprint(j, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for j, d := range []*daemon{shared, other} {
		if got, err := os.ReadFile(filepath.Join(d.Root, name)); err != nil || string(got) != fmt.Sprint(j, 2) {
			t.Fatalf("sandbox %d's file: %q %v", j, got, err)
		}
	}
	after, err := r.Metric(`sandbox_router_connections_total{protocol="http1"}`)
	if err != nil || after-before != 1 {
		t.Fatalf("client connections %v (%v), want one for both sandboxes", after-before, err)
	}
}

func TestRouterHTTPS(t *testing.T) {
	dir := t.TempDir()
	pool, err := testdaemon.WritePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := startRouter(t, "--https-bind-address", "127.0.0.1:0",
		"--tls-cert-file", filepath.Join(dir, "server.pem"), "--tls-key-file", filepath.Join(dir, "server.key"))
	port := r.Ports[1]
	if ok, err := r.ProxiesHTTP(shared.RESTPort); err != nil || !ok {
		t.Skip("this sandboxd-router does not proxy HTTP/1.1 yet (501)")
	}
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	rc, err := sandboxd.NewRouter(url, sandboxd.WithTLSConfig(&tls.Config{RootCAs: pool}),
		sandboxd.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// HTTP/1.1 over TLS; gRPC over the TLS port is left out here: through this router about
	// one call in fifteen hangs there (grpcurl alike), which is the router's.
	c := routed(t, rc, "sb", shared)
	name := "tls-" + t.Name()
	if _, err := c.WriteFile(ctx(t), name, []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	if b, err := c.ReadFile(ctx(t), name, 16); err != nil || string(b) != "sealed" {
		t.Fatalf("HTTP over TLS: %q %v", b, err)
	}
	// The system's roots do not know this CA.
	plain, err := sandboxd.NewRouter(url, sandboxd.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := routed(t, plain, "sb", shared).Stat(ctx(t), name); !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Fatalf("an unknown CA: %v", err)
	}
}
