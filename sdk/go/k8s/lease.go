package k8s

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Lease is a claimed or created sandbox: its objects, and once Ready its address and token.
// Its JSON form (sbx claim --output json) leaves the token out.
type Lease struct {
	c         *Client
	Kind      Kind   `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Sandbox   string `json:"sandbox"`
	Ready     bool   `json:"ready"`
	Reason    string `json:"reason"`
	PodIP     string `json:"pod_ip"`
	GRPCPort  int    `json:"grpc_port"`
	RESTPort  int    `json:"rest_port"`
	Token     string `json:"-"`
	Owned     bool   `json:"-"` // made by this Client (Claim, CreateSandbox)
	resolved  bool   // ports and token read since Ready
	forward   *Forward
}

func ready(obj *unstructured.Unstructured) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return s, r, msg
		}
	}
	return "", "", ""
}

// Refresh reads the objects once; true when the sandbox is Ready with an address.
func (l *Lease) Refresh(ctx context.Context) (bool, error) {
	gvr := Sandboxes
	if l.Kind == KindClaim {
		gvr = Claims
	}
	obj, err := l.c.get(ctx, gvr, l.Name)
	if err != nil {
		return false, err
	}
	status, reason, msg := ready(obj)
	l.Reason, l.Ready = reason, false
	if l.Kind == KindClaim {
		l.Sandbox, _, _ = unstructured.NestedString(obj.Object, "status", "sandbox", "name")
		if status != "True" || l.Sandbox == "" {
			return false, nil
		}
		if obj, err = l.c.get(ctx, Sandboxes, l.Sandbox); err != nil {
			return false, err
		}
		status, reason, msg = ready(obj)
	}
	if reason == "InvalidSpec" {
		return false, &sandboxd.Error{Code: "INVALID_ARGUMENT", Message: "sandbox " + l.Sandbox + ": " + msg}
	}
	ips, _, _ := unstructured.NestedStringSlice(obj.Object, "status", "podIPs")
	l.Ready = status == "True" && len(ips) > 0
	if l.Ready {
		l.PodIP = ips[0]
	}
	return l.Ready, nil
}

// WaitReady polls until the sandbox is Ready (bounded by ctx: give it a deadline), then reads
// its ports and token. A ctx that ends first is ErrDeadlineExceeded naming the last reason.
func (l *Lease) WaitReady(ctx context.Context) error {
	delay := 50 * time.Millisecond
	for {
		ok, err := l.Refresh(ctx)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			why := l.Reason
			if why == "" {
				why = "no status yet"
			}
			return &sandboxd.Error{Code: "DEADLINE_EXCEEDED",
				Message: fmt.Sprintf("%s %s/%s not Ready (%s)", l.Kind, l.Namespace, l.Name, why)}
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
	if err := l.readPorts(ctx); err != nil {
		return err
	}
	if err := l.readToken(ctx); err != nil {
		return err
	}
	l.resolved = true
	return nil
}

// readPorts takes the pod's sandboxd-grpc and sandboxd-http ports; a pod it may not read
// leaves the configured ones.
func (l *Lease) readPorts(ctx context.Context) error {
	pod, err := l.c.get(ctx, pods, l.Sandbox)
	if errors.Is(err, sandboxd.ErrPermissionDenied) || errors.Is(err, sandboxd.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	for _, c := range containers {
		ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
		for _, p := range ports {
			m, _ := p.(map[string]any)
			n, _ := m["containerPort"].(int64)
			switch m["name"] {
			case "sandboxd-grpc":
				l.GRPCPort = int(n)
			case "sandboxd-http":
				l.RESTPort = int(n)
			}
		}
	}
	return nil
}

func (l *Lease) readToken(ctx context.Context) error {
	sec, err := l.c.get(ctx, secrets, TokenSecretName(l.Sandbox))
	if errors.Is(err, sandboxd.ErrNotFound) {
		l.Token = "" // a sandbox the controller gave no token
		return nil
	}
	if err != nil {
		return err
	}
	raw, _, _ := unstructured.NestedString(sec.Object, "data", "token")
	tok, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return fmt.Errorf("secret %s: token: %w", TokenSecretName(l.Sandbox), err)
	}
	l.Token = string(tok)
	return nil
}

// Address is "host:port" of the sandbox's gRPC API (once Ready).
func (l *Lease) Address() string {
	return net.JoinHostPort(l.PodIP, strconv.Itoa(l.GRPCPort))
}

// Connect returns a sandboxd client on the sandbox's Endpoint with its token; opts come
// after (WithToken overrides the Secret's). It waits Ready first (up to the config's Timeout)
// when the lease is not resolved yet. With a port-forward, close the lease (Close) after the
// client. Through a router (ConnectRouter) the client is one of the Client's Router, by the
// sandbox's name and namespace.
func (l *Lease) Connect(opts ...sandboxd.Option) (*sandboxd.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.Timeout)
	defer cancel()
	if !l.Ready || !l.resolved {
		if err := l.WaitReady(ctx); err != nil {
			return nil, err
		}
	}
	if l.c.cfg.Connect == ConnectRouter {
		// By name: the router finds the pod and sandboxd's ports (named on the pod).
		r, err := l.c.Router()
		if err != nil {
			return nil, err
		}
		base := []sandboxd.Option{sandboxd.WithNamespace(l.Namespace), sandboxd.WithToken(l.Token),
			sandboxd.WithTimeout(l.c.cfg.Timeout)}
		return r.Sandbox(l.Sandbox, append(base, opts...)...)
	}
	host, grpcPort, restPort, err := l.Endpoint(ctx)
	if err != nil {
		return nil, err
	}
	base := []sandboxd.Option{sandboxd.WithGRPCPort(grpcPort), sandboxd.WithRESTPort(restPort),
		sandboxd.WithToken(l.Token), sandboxd.WithTimeout(l.c.cfg.Timeout)}
	return sandboxd.New(host, append(base, opts...)...)
}

// Delete deletes the claim or Sandbox (the controller removes its sandbox, pod and Secret).
func (l *Lease) Delete(ctx context.Context) error {
	return l.c.Delete(ctx, l.Kind, l.Name)
}

// WaitDeleted polls until the claim or Sandbox is gone (bounded by ctx).
func (l *Lease) WaitDeleted(ctx context.Context) error {
	gvr := Sandboxes
	if l.Kind == KindClaim {
		gvr = Claims
	}
	for {
		_, err := l.c.get(ctx, gvr, l.Name)
		if errors.Is(err, sandboxd.ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return &sandboxd.Error{Code: "DEADLINE_EXCEEDED", Message: fmt.Sprintf("%s %s still there", l.Kind, l.Name)}
		case <-time.After(100 * time.Millisecond):
		}
	}
}
