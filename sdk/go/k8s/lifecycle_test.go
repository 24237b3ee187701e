package k8s_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
	"github.com/sandboxd/sandboxd/sdk/go/k8s"
)

// These tests need a control plane with the controller, a warm pool and a real sandboxd
// behind its ready sandbox: test/controller/test_sdk_lifecycle.py runs the compiled test
// binary with KUBECONFIG, SANDBOX_NAMESPACE, SBX_TEST_POOL and SBX_TEST_WARM (the sandbox
// the claim adopts) set.
func site(t *testing.T) (ns, pool, warm string) {
	ns, pool, warm = os.Getenv("SANDBOX_NAMESPACE"), os.Getenv("SBX_TEST_POOL"), os.Getenv("SBX_TEST_WARM")
	if os.Getenv("KUBECONFIG") == "" || ns == "" || pool == "" || warm == "" {
		t.Skip("needs a cluster: test/controller/test_sdk_lifecycle.py runs these tests")
	}
	return ns, pool, warm
}

func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestErrorsAndNames(t *testing.T) {
	ns, _, warm := site(t)
	ctx := bounded(t, time.Minute)
	kc, err := k8s.New(k8s.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.Claim(ctx, "no-such-pool"); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("a missing pool: %v", err)
	}
	if _, err := kc.Get(ctx, k8s.KindClaim, "no-such-claim"); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("a missing claim: %v", err)
	}
	l, err := kc.Get(ctx, k8s.KindSandbox, warm)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitReady(ctx); err != nil || l.PodIP != "127.0.0.1" || l.Token == "" {
		t.Fatalf("%+v %v", l, err)
	}
	c, err := l.Connect(sandboxd.WithToken("wrong"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Run(ctx, []string{"true"}); !errors.Is(err, sandboxd.ErrUnauthenticated) {
		t.Fatalf("a wrong token: %v", err)
	}
	if k8s.TokenSecretName("a") != "a-sandboxd-token" || len(k8s.TokenSecretName(string(make([]byte, 300)))) > 253 {
		t.Fatal("token secret names")
	}
	// The pool's sandboxes carry the controller's hash of their template's name.
	if h := os.Getenv("SBX_TEST_TEMPLATE_HASH"); k8s.NameHash("tpl") != h {
		t.Fatalf("NameHash(tpl) = %s, the controller's %s", k8s.NameHash("tpl"), h)
	}
}

func TestClaimRunRelease(t *testing.T) {
	ns, pool, warm := site(t)
	ctx := bounded(t, 2*time.Minute)
	out, err := claimAndRun(ctx, ns, pool)
	if err != nil || out != "hello from "+warm+"\n" {
		t.Fatalf("%q %v", out, err)
	}
	kc, err := k8s.New(k8s.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	// The claim was deleted on the way out, and the controller deleted the adopted sandbox.
	l, err := kc.Get(ctx, k8s.KindSandbox, warm)
	if err == nil {
		err = l.WaitDeleted(ctx)
	}
	if err != nil && !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatal(err)
	}
}

// TestPortForward claims through the cluster and reaches the sandbox only through a
// port-forward: test/controller/test_port_forward.py runs it (SBX_TEST_PORT_FORWARD=1) with
// pods whose ports answer only through the API server and kwok's kubelet server.
func TestPortForward(t *testing.T) {
	ns, pool, warm := site(t)
	if os.Getenv("SBX_TEST_PORT_FORWARD") == "" {
		t.Skip("needs kwok's port-forward: test/controller/test_port_forward.py runs this test")
	}
	ctx := bounded(t, 2*time.Minute)
	if _, err := k8s.New(k8s.Config{Namespace: ns, Connect: "ssh"}); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("an unknown connect mode: %v", err)
	}
	kc, err := k8s.New(k8s.Config{Namespace: ns, Connect: k8s.ConnectPortForward})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := kc.Claim(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Delete(context.Background())
	if err := lease.WaitReady(ctx); err != nil || lease.Sandbox != warm {
		t.Fatalf("%+v %v", lease, err)
	}
	c, err := lease.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close()
	defer c.Close()
	r, err := c.Run(ctx, []string{"echo", "forwarded"})
	if err != nil || string(r.Stdout) != "forwarded\n" {
		t.Fatalf("run: %+v %v", r, err)
	}
	if _, err := c.WriteFile(ctx, "go.txt", []byte("from go\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := c.ReadFile(ctx, "go.txt", 1<<20); err != nil || string(b) != "from go\n" {
		t.Fatalf("read: %q %v", b, err)
	}
	if err := lease.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.WaitDeleted(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the controller has deleted the pod, a port-forward to it is NotFound.
	for {
		f, err := lease.PortForward(ctx)
		if errors.Is(err, sandboxd.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatalf("a port-forward to a deleted pod: %v", err)
		}
		f.Close()
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRouterConfig needs no cluster: a kubeconfig is read, no API call is made.
func TestRouterConfig(t *testing.T) {
	t.Setenv("SANDBOXD_ROUTER", "")
	if _, err := k8s.New(k8s.Config{Connect: k8s.ConnectRouter}); !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("router mode without a router: %v", err)
	}
	cfg := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(cfg, []byte(`apiVersion: v1
kind: Config
current-context: t
clusters: [{name: t, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: t, user: {token: x}}]
contexts: [{name: t, context: {cluster: t, user: t}}]
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := k8s.New(k8s.Config{Kubeconfig: cfg, Router: "http://127.0.0.1:1"})
	if err != nil || kc.Connect() != k8s.ConnectRouter {
		t.Fatalf("a router given: auto goes through it (%v)", err)
	}
	r1, err1 := kc.Router()
	r2, err2 := kc.Router()
	if err1 != nil || err2 != nil || r1 != r2 {
		t.Fatalf("one connection for every lease: %v %v", err1, err2)
	}
	kc.Close()
	t.Setenv("SANDBOXD_ROUTER", "http://127.0.0.1:1")
	if kc, err := k8s.New(k8s.Config{Kubeconfig: cfg, Connect: k8s.ConnectPodIP}); err != nil || kc.Connect() != k8s.ConnectPodIP {
		t.Fatalf("an explicit mode stands (%v)", err)
	}
}
