// Package k8s is the sandbox lifecycle on Kubernetes: claim a sandbox from a warm pool (a
// SandboxClaim) or make one from a SandboxTemplate (a Sandbox), wait until it is Ready,
// connect to its sandboxd with the token of its own Secret, and delete it when done. It uses
// client-go's dynamic client, so no typed clients are generated for the sandbox resources.
//
//	kc, err := k8s.New(k8s.Config{Namespace: "agents"})   // kubeconfig, or in-cluster
//	lease, err := kc.Claim(ctx, "python-pool")
//	defer lease.Delete(context.Background())
//	err = lease.WaitReady(ctx)                              // bounded by ctx
//	c, err := lease.Connect()                               // a *sandboxd.Client
//
// The address is the pod IP of the Sandbox status and the ports the pod's sandboxd-grpc and
// sandboxd-http container ports (the controller's --sandboxd-grpc-port/--sandboxd-rest-port, or
// the pair it took instead when the pod's containers declare those);
// the token is in the Secret "<sandbox>-sandboxd-token" the controller made. Config.Connect
// says how to reach it: the pod IP, or from outside the cluster local ports forwarded through
// the API server (pods/portforward); by default the pod IP when it answers. Errors of the
// API are *sandboxd.Error values (errors.Is(err, sandboxd.ErrNotFound), ...).
package k8s

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// The resources, as the controller serves them.
var (
	Sandboxes  = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	Claims     = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	WarmPools  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	Templates  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	pods       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	secrets    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	templateRL = "agents.x-k8s.io/sandbox-template-ref-hash"
)

// Kind names what a Lease holds: a claim or a Sandbox.
type Kind string

const (
	KindClaim   Kind = "SandboxClaim"
	KindSandbox Kind = "Sandbox"
)

// Config says which cluster and namespace. Zero values: $KUBECONFIG or ~/.kube/config (in a
// pod without either, the in-cluster config), its current context and that context's
// namespace (in a pod, the service account's; else "default"). GRPCPort/RESTPort are used
// when the pod's ports cannot be read (default 9090/8080); Timeout bounds each API call
// (default 30 s) and is the connection's timeout. Connect says how a Lease reaches its
// sandboxd: ConnectAuto (the default), ConnectPodIP, ConnectPortForward or ConnectRouter;
// Router is the sandboxd-router's URL (default $SANDBOXD_ROUTER), with which ConnectAuto
// goes through it; RouterTLS the TLS configuration of an https:// one (nil: system roots).
type Config struct {
	Kubeconfig, Context, Namespace string
	GRPCPort, RESTPort             int
	Timeout                        time.Duration
	Connect                        string
	Router                         string
	RouterTLS                      *tls.Config
}

// Client claims, creates, finds and deletes sandboxes.
type Client struct {
	dyn  dynamic.Interface
	rest *rest.Config
	ns   string
	cfg  Config

	mu     sync.Mutex
	router *sandboxd.Router // made by the first lease that connects through it
}

// New makes a Client from the kubeconfig (or the in-cluster config).
func New(cfg Config) (*Client, error) {
	if cfg.Connect == "" {
		cfg.Connect = ConnectAuto
	}
	if err := validConnect(cfg.Connect); err != nil {
		return nil, err
	}
	if cfg.Router == "" {
		cfg.Router = os.Getenv("SANDBOXD_ROUTER")
	}
	if cfg.Connect == ConnectAuto && cfg.Router != "" {
		cfg.Connect = ConnectRouter
	}
	if cfg.Connect == ConnectRouter && cfg.Router == "" {
		return nil, &sandboxd.Error{Code: "INVALID_ARGUMENT",
			Message: "connect router needs the router's URL (Config.Router or $SANDBOXD_ROUTER)"}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cfg.Kubeconfig != "" {
		rules.ExplicitPath = cfg.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: cfg.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, &sandboxd.Error{Code: "INVALID_ARGUMENT", Message: "kubernetes config: " + err.Error()}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	rc.Timeout = cfg.Timeout
	if cfg.GRPCPort == 0 {
		cfg.GRPCPort = 9090
	}
	if cfg.RESTPort == 0 {
		cfg.RESTPort = 8080
	}
	if cfg.Namespace == "" {
		if cfg.Namespace, _, err = cc.Namespace(); err != nil || cfg.Namespace == "" {
			cfg.Namespace = "default"
		}
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &Client{dyn: dyn, rest: rc, ns: cfg.Namespace, cfg: cfg}, nil
}

// Namespace is where the client's claims and sandboxes live.
func (c *Client) Namespace() string { return c.ns }

// Connect is how the client's leases reach sandboxd (ConnectAuto resolved to ConnectRouter
// when a router is set).
func (c *Client) Connect() string { return c.cfg.Connect }

// Router is the one connection to the router that the client's leases share (made on first
// use; Close closes it).
func (c *Client) Router() (*sandboxd.Router, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.router == nil {
		r, err := sandboxd.NewRouter(c.cfg.Router, sandboxd.WithTimeout(c.cfg.Timeout),
			sandboxd.WithTLSConfig(c.cfg.RouterTLS))
		if err != nil {
			return nil, err
		}
		c.router = r
	}
	return c.router, nil
}

// Close closes the connection to the router, if one was made.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.router == nil {
		return nil
	}
	err := c.router.Close()
	c.router = nil
	return err
}

// apiError turns an API error into a *sandboxd.Error naming what was asked.
func apiError(what string, err error) error {
	if err == nil {
		return nil
	}
	code := "UNAVAILABLE"
	switch {
	case apierrors.IsNotFound(err):
		code = "NOT_FOUND"
	case apierrors.IsForbidden(err):
		code = "PERMISSION_DENIED"
	case apierrors.IsUnauthorized(err):
		code = "UNAUTHENTICATED"
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		code = "CONFLICT"
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		code = "INVALID_ARGUMENT"
	case errors.Is(err, context.DeadlineExceeded):
		code = "DEADLINE_EXCEEDED"
	}
	return &sandboxd.Error{Code: code, Message: what + ": " + err.Error()}
}

func (c *Client) res(gvr schema.GroupVersionResource) dynamic.ResourceInterface {
	return c.dyn.Resource(gvr).Namespace(c.ns)
}

func (c *Client) get(ctx context.Context, gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	o, err := c.res(gvr).Get(ctx, name, metav1.GetOptions{})
	return o, apiError(fmt.Sprintf("get %s/%s", gvr.Resource, name), err)
}

func (c *Client) create(ctx context.Context, gvr schema.GroupVersionResource, obj map[string]any) (*unstructured.Unstructured, error) {
	o, err := c.res(gvr).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	return o, apiError("create "+gvr.Resource, err)
}

// meta is the metadata of a new object: name, or a name generated from prefix.
func (c *Client) meta(name, prefix string) map[string]any {
	md := map[string]any{"namespace": c.ns}
	if name != "" {
		md["name"] = name
	} else {
		md["generateName"] = prefix[:min(len(prefix), 50)] + "-"
	}
	return md
}

// ClaimOption changes a claim: its name, env for its containers (a cold start).
type ClaimOption func(spec, md map[string]any)

// Name names the claim (default: generated from the pool's name).
func Name(n string) ClaimOption {
	return func(_, md map[string]any) {
		if n != "" {
			delete(md, "generateName")
			md["name"] = n
		}
	}
}

// Env adds variables to the sandbox's containers; a running pod cannot take them, so such a
// claim starts a sandbox of its own instead of adopting a warm one. The pool's template must
// allow it (envVarsInjectionPolicy Allowed or Overrides): otherwise the controller refuses the
// claim (Ready False, reason EnvVarsInjectionRejected).
func Env(env map[string]string) ClaimOption {
	return func(spec, _ map[string]any) {
		var list []any
		for k, v := range env {
			list = append(list, map[string]any{"name": k, "value": v})
		}
		if len(list) > 0 {
			spec["env"] = list
		}
	}
}

// Claim creates a SandboxClaim on the warm pool and returns its Lease (not Ready yet:
// WaitReady). A pool that does not exist is ErrNotFound at once.
func (c *Client) Claim(ctx context.Context, pool string, opts ...ClaimOption) (*Lease, error) {
	if _, err := c.get(ctx, WarmPools, pool); err != nil {
		return nil, err
	}
	spec := map[string]any{"warmPoolRef": map[string]any{"name": pool}}
	md := c.meta("", pool)
	for _, o := range opts {
		o(spec, md)
	}
	o, err := c.create(ctx, Claims, map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim", "metadata": md, "spec": spec})
	if err != nil {
		return nil, err
	}
	return c.lease(KindClaim, o.GetName(), true), nil
}

// CreateSandbox makes a sandbox of the template: claimed from a warm pool of that template
// when the namespace has one, else a Sandbox made from the template's pod template. name may
// be empty (generated).
func (c *Client) CreateSandbox(ctx context.Context, template, name string) (*Lease, error) {
	pools, err := c.res(WarmPools).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, apiError("list sandboxwarmpools", err)
	}
	for _, p := range pools.Items {
		if t, _, _ := unstructured.NestedString(p.Object, "spec", "sandboxTemplateRef", "name"); t == template {
			return c.Claim(ctx, p.GetName(), Name(name))
		}
	}
	t, err := c.get(ctx, Templates, template)
	if err != nil {
		return nil, err
	}
	pt, _, _ := unstructured.NestedMap(t.Object, "spec", "podTemplate")
	if pt == nil {
		return nil, &sandboxd.Error{Code: "INVALID_ARGUMENT", Message: "template " + template + " has no podTemplate"}
	}
	labels, _, _ := unstructured.NestedStringMap(pt, "metadata", "labels")
	if labels == nil {
		labels = map[string]string{}
	}
	labels[templateRL] = NameHash(template)
	lm := map[string]any{}
	for k, v := range labels {
		lm[k] = v
	}
	if err := unstructured.SetNestedMap(pt, lm, "metadata", "labels"); err != nil {
		return nil, err
	}
	spec := map[string]any{"podTemplate": pt}
	if svc, ok, _ := unstructured.NestedBool(t.Object, "spec", "service"); ok {
		spec["service"] = svc
	}
	o, err := c.create(ctx, Sandboxes, map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": c.meta(name, template), "spec": spec})
	if err != nil {
		return nil, err
	}
	return c.lease(KindSandbox, o.GetName(), true), nil
}

// Get returns a Lease on an existing claim or Sandbox (checked to exist). Its Delete deletes
// it all the same; Owned is false.
func (c *Client) Get(ctx context.Context, kind Kind, name string) (*Lease, error) {
	l := c.lease(kind, name, false)
	if kind != KindClaim && kind != KindSandbox {
		return nil, &sandboxd.Error{Code: "INVALID_ARGUMENT", Message: "kind must be SandboxClaim or Sandbox"}
	}
	if _, err := l.Refresh(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Delete deletes a claim (the controller deletes its sandbox) or a Sandbox; gone is fine.
func (c *Client) Delete(ctx context.Context, kind Kind, name string) error {
	gvr := Claims
	if kind == KindSandbox {
		gvr = Sandboxes
	}
	err := c.res(gvr).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return apiError(fmt.Sprintf("delete %s/%s", gvr.Resource, name), err)
}

func (c *Client) lease(kind Kind, name string, owned bool) *Lease {
	l := &Lease{c: c, Kind: kind, Name: name, Namespace: c.ns, GRPCPort: c.cfg.GRPCPort, RESTPort: c.cfg.RESTPort, Owned: owned}
	if kind == KindSandbox {
		l.Sandbox = name
	}
	return l
}

// NameHash is the controller's hash of a name (32-bit FNV-1a, 8 hex digits).
func NameHash(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%08x", h.Sum32())
}

// TokenSecretName is the Secret holding a sandbox's token, named as the controller names it.
func TokenSecretName(sandbox string) string {
	if n := sandbox + "-sandboxd-token"; len(n) <= 253 {
		return n
	}
	return sandbox[:200] + "-" + NameHash(sandbox) + "-sandboxd-token"
}
