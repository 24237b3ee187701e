package sandboxd

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	fpb "github.com/sandboxd/sandboxd/sdk/go/internal/filespb"
	xpb "github.com/sandboxd/sandboxd/sdk/go/internal/processespb"
	pb "github.com/sandboxd/sandboxd/sdk/go/internal/processpb"
)

// Router is one connection to a sandboxd-router (a gRPC connection and an HTTP keep-alive
// pool) through which the Clients of Sandbox reach many sandboxes, each call and request
// carrying the routing keys of its own sandbox: X-Sandbox-ID, X-Sandbox-Namespace and, when
// given, X-Sandbox-Port, X-Sandbox-UID and X-Sandbox-Pod-IP (as gRPC metadata in lower case).
// It is safe for concurrent use.
//
//	r, err := sandboxd.NewRouter("http://router.example:8080")
//	defer r.Close()
//	a, err := r.Sandbox("build-1", sandboxd.WithNamespace("team-a"))
//	b, err := r.Sandbox("build-2", sandboxd.WithNamespace("team-a"), sandboxd.WithToken(tok))
type Router struct {
	conn    *grpc.ClientConn
	http    *http.Client
	base    string
	token   string
	timeout time.Duration
	tls     *tls.Config
}

// route is what the routing options set.
type route struct {
	namespace, uid, podIP string
}

// WithNamespace is the sandbox's namespace through a Router (default "default").
func WithNamespace(ns string) Option { return func(c *config) { c.route.namespace = ns } }

// WithUID routes by the sandbox pod's UID (X-Sandbox-UID) through a Router.
func WithUID(uid string) Option { return func(c *config) { c.route.uid = uid } }

// WithTLSConfig is the TLS configuration of an https:// router (its RootCAs for a private
// CA, client certificates); default: the system's roots.
func WithTLSConfig(c *tls.Config) Option { return func(cfg *config) { cfg.tls = c } }

// WithPodIP routes to this pod IP (X-Sandbox-Pod-IP) through a Router, which checks it.
func WithPodIP(ip string) Option { return func(c *config) { c.route.podIP = ip } }

// parseRouterURL gives the gRPC target, the HTTP base and whether TLS is on of
// http://host[:port] (80), https://host[:port] (443) or host:port (http).
func parseRouterURL(raw string) (target, base string, tls bool, err error) {
	s := raw
	if u, e := url.Parse(s); e != nil || u.Scheme == "" || u.Host == "" {
		s = "http://" + raw
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", "", false, fmt.Errorf("sandboxd: router URL %q: want http://host:port or https://host:port", raw)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", "", false, fmt.Errorf("sandboxd: router URL %q: a router is reached at its root, not a path", raw)
	}
	tls = u.Scheme == "https"
	port := u.Port()
	if port == "" {
		port = map[bool]string{true: "443", false: "80"}[tls]
	}
	target = net.JoinHostPort(u.Hostname(), port)
	return target, u.Scheme + "://" + target, tls, nil
}

// NewRouter makes the connection to the router at url (made lazily: NewRouter fails only on
// bad settings). Options: WithToken (the default token of its sandboxes, else
// $SANDBOXD_TOKEN), WithTimeout (theirs, 30s), WithTLSConfig (https://), WithHTTPClient,
// WithDialOptions.
func NewRouter(rawURL string, opts ...Option) (*Router, error) {
	cfg, err := configure(config{timeout: 30 * time.Second}, opts)
	if err != nil {
		return nil, err
	}
	target, base, useTLS, err := parseRouterURL(rawURL)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	tc := cfg.tls
	if useTLS {
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(target, append(dialOptions(creds), cfg.dialOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	hc := cfg.httpClient
	if hc == nil {
		hc = httpClient(nil)
		hc.Transport.(*http.Transport).TLSClientConfig = tc
	}
	return &Router{conn: conn, http: hc, base: base, token: cfg.token, timeout: cfg.timeout,
		tls: tc}, nil
}

// Sandbox is a Client of the sandbox called name through the router, on the router's
// connection. Options: WithNamespace, WithUID, WithPodIP, WithGRPCPort and WithRESTPort (sent
// as X-Sandbox-Port on gRPC calls and on HTTP requests respectively; without them the router
// finds sandboxd's ports), WithToken (else the Router's), WithTimeout. The Client's Close
// leaves the connection open.
func (r *Router) Sandbox(name string, opts ...Option) (*Client, error) {
	if name == "" {
		return nil, fmt.Errorf("sandboxd: a sandbox name is needed to connect through a router")
	}
	cfg, err := configure(config{timeout: r.timeout, token: r.token, tokenSet: true}, opts)
	if err != nil {
		return nil, err
	}
	if cfg.grpcTarget != "" || cfg.restURL != "" || cfg.unixSocket != "" || cfg.httpClient != nil ||
		len(cfg.dialOpts) > 0 || cfg.tls != nil {
		return nil, fmt.Errorf("sandboxd: through a router, the router is the address (no target, URL, socket, TLS, HTTP client or dial options per sandbox)")
	}
	ns := cfg.route.namespace
	if ns == "" {
		ns = "default"
	}
	keys := [][2]string{{"X-Sandbox-ID", name}, {"X-Sandbox-Namespace", ns}}
	if cfg.route.uid != "" {
		keys = append(keys, [2]string{"X-Sandbox-UID", cfg.route.uid})
	}
	if cfg.route.podIP != "" {
		keys = append(keys, [2]string{"X-Sandbox-Pod-IP", cfg.route.podIP})
	}
	c := &Client{conn: r.conn, proc: pb.NewProcessServiceClient(r.conn),
		jobs: xpb.NewProcessesClient(r.conn), files: fpb.NewFilesClient(r.conn), http: r.http,
		base: r.base, token: cfg.token, timeout: cfg.timeout, httpRoute: http.Header{},
		shared: true, tls: r.tls}
	for _, kv := range keys {
		c.grpcRoute = append(c.grpcRoute, strings.ToLower(kv[0]), kv[1])
		c.httpRoute.Set(kv[0], kv[1])
	}
	if cfg.grpcPort != 0 {
		c.grpcRoute = append(c.grpcRoute, "x-sandbox-port", strconv.Itoa(cfg.grpcPort))
	}
	if cfg.restPort != 0 {
		c.httpRoute.Set("X-Sandbox-Port", strconv.Itoa(cfg.restPort))
	}
	return c, nil
}

// Close closes the router connection, and with it what its Clients have open.
func (r *Router) Close() error {
	r.http.CloseIdleConnections()
	return r.conn.Close()
}
