package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// How a Lease reaches its sandboxd (Config.Connect).
const (
	// ConnectAuto is ConnectRouter when Config.Router is set; else it dials the pod IP inside
	// a pod or when it answers within ProbeTimeout, else opens a port-forward.
	ConnectAuto = "auto"
	// ConnectPodIP dials the pod IP: in the cluster, or wherever pod IPs are routed.
	ConnectPodIP = "pod-ip"
	// ConnectPortForward listens on 127.0.0.1 and carries each connection through the API
	// server's pods/portforward subresource (as kubectl port-forward): outside the cluster.
	ConnectPortForward = "port-forward"
	// ConnectRouter goes through the sandboxd-router at Config.Router, by the sandbox's name
	// and namespace; the leases of a Client share one connection to it.
	ConnectRouter = "router"
)

// ProbeTimeout is how long ConnectAuto waits for the pod IP to answer.
const ProbeTimeout = time.Second

func validConnect(mode string) error {
	switch mode {
	case ConnectAuto, ConnectPodIP, ConnectPortForward, ConnectRouter:
		return nil
	}
	return &sandboxd.Error{Code: "INVALID_ARGUMENT",
		Message: fmt.Sprintf("connect must be auto, pod-ip, port-forward or router, not %q", mode)}
}

// Forward is an open port-forward to a sandbox's gRPC and REST ports on 127.0.0.1.
type Forward struct {
	GRPCPort, RESTPort int
	stop               chan struct{}
	done               chan error
}

// Close stops the listeners and the connections through them.
func (f *Forward) Close() {
	if f == nil || f.stop == nil {
		return
	}
	close(f.stop)
	f.stop = nil
	<-f.done
}

// PortForward opens local listeners for the sandbox's pod's gRPC and REST ports through the
// API server (needs the pods/portforward right). ctx bounds the set-up.
func (l *Lease) PortForward(ctx context.Context) (*Forward, error) {
	// The upgrade's refusal comes back as text; a pod that is gone is a typed NotFound here
	// (a client that may not read pods goes on and learns from the upgrade).
	if _, err := l.c.get(ctx, pods, l.Sandbox); err != nil && !errors.Is(err, sandboxd.ErrPermissionDenied) {
		return nil, err
	}
	rc := l.c.rest
	transport, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, err
	}
	u, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, err
	}
	u.Path = path.Join(u.Path, "api", "v1", "namespaces", l.Namespace, "pods", l.Sandbox, "portforward")
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	f := &Forward{stop: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan struct{})
	ports := []string{"0:" + strconv.Itoa(l.GRPCPort), "0:" + strconv.Itoa(l.RESTPort)}
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, ports, f.stop, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, err
	}
	go func() { f.done <- fw.ForwardPorts() }()
	what := fmt.Sprintf("port-forward to pod %s/%s", l.Namespace, l.Sandbox)
	select {
	case <-ready:
	case err := <-f.done:
		if strings.Contains(err.Error(), " is forbidden: ") {
			return nil, &sandboxd.Error{Code: "PERMISSION_DENIED", Message: what + ": " + err.Error()}
		}
		// The pod went between the check above and the upgrade.
		if strings.Contains(err.Error(), fmt.Sprintf("pods %q not found", l.Sandbox)) {
			return nil, &sandboxd.Error{Code: "NOT_FOUND", Message: what + ": " + err.Error()}
		}
		return nil, apiError(what, err)
	case <-ctx.Done():
		close(f.stop)
		<-f.done
		return nil, apiError(what, ctx.Err())
	}
	got, err := fw.GetPorts()
	if err != nil || len(got) != 2 {
		f.Close()
		return nil, fmt.Errorf("%s: local ports: %v", what, err)
	}
	f.GRPCPort, f.RESTPort = int(got[0].Local), int(got[1].Local)
	return f, nil
}

func (l *Lease) podIPAnswers() bool {
	c, err := net.DialTimeout("tcp", l.Address(), ProbeTimeout)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// Endpoint is the host and ports to dial, as Config.Connect says; with a port-forward, the
// local listeners it opened (the Lease's Close closes them). The lease must be Ready. Through
// a router there is none to dial (Connect goes through the router).
func (l *Lease) Endpoint(ctx context.Context) (host string, grpcPort, restPort int, err error) {
	mode := l.c.cfg.Connect
	if mode == ConnectRouter {
		return "", 0, 0, &sandboxd.Error{Code: "FAILED_PRECONDITION",
			Message: "connected through a router: no address to dial (use Connect)"}
	}
	if mode == ConnectAuto {
		mode = ConnectPortForward
		if os.Getenv("KUBERNETES_SERVICE_HOST") != "" || l.podIPAnswers() {
			mode = ConnectPodIP
		}
	}
	if mode == ConnectPodIP {
		return l.PodIP, l.GRPCPort, l.RESTPort, nil
	}
	l.Close()
	if l.forward, err = l.PortForward(ctx); err != nil {
		return "", 0, 0, err
	}
	return "127.0.0.1", l.forward.GRPCPort, l.forward.RESTPort, nil
}

// Close closes the port-forward the lease opened, if any (not the claim: see Delete).
func (l *Lease) Close() {
	l.forward.Close()
	l.forward = nil
}
