// Package sandboxd is the Go client of sandboxd: processes over gRPC (process.v1), files over
// REST, streamed both ways.
//
//	c, err := sandboxd.New("127.0.0.1", sandboxd.WithToken(tok))
//	defer c.Close()
//	res, err := c.Run(ctx, []string{"echo", "hi"})
//
// Through a sandboxd-router, many sandboxes share one connection (Router):
//
//	r, err := sandboxd.NewRouter("http://router:8080")
//	c, err := r.Sandbox("my-sandbox", sandboxd.WithNamespace("team-a"))
package sandboxd

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	fpb "github.com/sandboxd/sandboxd/sdk/go/internal/filespb"
	xpb "github.com/sandboxd/sandboxd/sdk/go/internal/processespb"
	pb "github.com/sandboxd/sandboxd/sdk/go/internal/processpb"
)

// Client is a connection to one sandboxd. It is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	proc    pb.ProcessServiceClient
	jobs    xpb.ProcessesClient
	files   fpb.FilesClient
	http    *http.Client
	base    string
	token   string
	timeout time.Duration
	// Through a Router: the routing keys of each gRPC call (metadata pairs) and of each HTTP
	// request, and the router's connection, which Close leaves open.
	grpcRoute []string
	httpRoute http.Header
	shared    bool
	tls       *tls.Config // a Router's, for wss:// terminals
}

type config struct {
	grpcTarget string
	restURL    string
	grpcPort   int
	restPort   int
	unixSocket string
	token      string
	tokenSet   bool
	timeout    time.Duration
	httpClient *http.Client
	dialOpts   []grpc.DialOption
	route      route
	tls        *tls.Config
}

// Option configures New.
type Option func(*config)

// WithGRPCPort sets the gRPC port on the host (default 9090).
func WithGRPCPort(p int) Option { return func(c *config) { c.grpcPort = p } }

// WithRESTPort sets the REST port on the host (default 8080).
func WithRESTPort(p int) Option { return func(c *config) { c.restPort = p } }

// WithGRPCTarget sets the gRPC target verbatim ("host:port", "unix:/path", any grpc-go target).
func WithGRPCTarget(t string) Option { return func(c *config) { c.grpcTarget = t } }

// WithRESTURL sets the REST base URL verbatim ("http://host:port").
func WithRESTURL(u string) Option { return func(c *config) { c.restURL = u } }

// WithUnixSocket reaches gRPC through the daemon's --grpc-socket.
func WithUnixSocket(path string) Option { return func(c *config) { c.unixSocket = path } }

// WithToken sends "authorization: Bearer <token>" on every call (default: $SANDBOXD_TOKEN).
func WithToken(t string) Option { return func(c *config) { c.token, c.tokenSet = t, true } }

// WithTimeout bounds each unary call and each small REST request made without a deadline
// of its own (default 30s). Streams and transfers are bounded by their context only.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithHTTPClient uses this client for REST (its Timeout should be 0: transfers are long).
func WithHTTPClient(h *http.Client) Option { return func(c *config) { c.httpClient = h } }

// WithDialOptions adds grpc-go dial options (TLS credentials, interceptors, ...).
func WithDialOptions(o ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, o...) }
}

// New connects to the sandboxd on host (gRPC 9090, REST 8080 unless told otherwise). The
// gRPC connection is made lazily; New fails only on bad settings.
func New(host string, opts ...Option) (*Client, error) {
	cfg, err := configure(config{grpcPort: 9090, restPort: 8080, timeout: 30 * time.Second}, opts)
	if err != nil {
		return nil, err
	}
	if host == "" {
		host = "127.0.0.1"
	}
	target := cfg.grpcTarget
	if target == "" && cfg.unixSocket != "" {
		target = "unix:" + cfg.unixSocket
	}
	if target == "" {
		target = net.JoinHostPort(host, fmt.Sprint(cfg.grpcPort))
	}
	base := cfg.restURL
	if base == "" {
		base = "http://" + net.JoinHostPort(host, fmt.Sprint(cfg.restPort))
	}
	dial := append(dialOptions(insecure.NewCredentials()), cfg.dialOpts...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	return &Client{
		conn: conn, proc: pb.NewProcessServiceClient(conn), jobs: xpb.NewProcessesClient(conn),
		files: fpb.NewFilesClient(conn), http: httpClient(cfg.httpClient),
		base: strings.TrimRight(base, "/"), token: cfg.token, timeout: cfg.timeout,
	}, nil
}

// configure applies opts to cfg: a positive timeout, the token ($SANDBOXD_TOKEN unless set).
func configure(cfg config, opts []Option) (config, error) {
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		return cfg, fmt.Errorf("sandboxd: timeout must be positive")
	}
	if !cfg.tokenSet {
		cfg.token = os.Getenv("SANDBOXD_TOKEN")
	}
	return cfg, nil
}

// dialOptions are the gRPC settings of every connection: its credentials, 64 MiB messages.
func dialOptions(creds credentials.TransportCredentials) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
	}
}

// httpClient is hc, or one of our own that never goes through an environment proxy.
func httpClient(hc *http.Client) *http.Client {
	if hc != nil {
		return hc
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // a sandbox address is never reached through an environment proxy
	return &http.Client{Transport: tr}
}

// Close closes the gRPC connection (streams still open end, and the daemon kills their
// processes) and idle HTTP connections. A client of a Router leaves the Router's connection
// open (Router.Close closes it).
func (c *Client) Close() error {
	if c.shared {
		return nil
	}
	c.http.CloseIdleConnections()
	return c.conn.Close()
}

// rpcCtx adds the token, the routing keys and, when ctx has no deadline, the client's timeout.
func (c *Client) rpcCtx(ctx context.Context, bounded bool) (context.Context, context.CancelFunc) {
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	if len(c.grpcRoute) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, c.grpcRoute...)
	}
	if _, ok := ctx.Deadline(); bounded && !ok {
		return context.WithTimeout(ctx, c.timeout)
	}
	return ctx, func() {}
}
