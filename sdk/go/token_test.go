package sandboxd_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
	pb "github.com/sandboxd/sandboxd/sdk/go/internal/processpb"
)

// recorder is a real grpc-go ProcessService that notes the authorization metadata it gets.
type recorder struct {
	pb.UnimplementedProcessServiceServer
	mu   sync.Mutex
	auth []string
}

func (r *recorder) Start(req *pb.StartRequest, s grpc.ServerStreamingServer[pb.StartResponse]) error {
	md, _ := metadata.FromIncomingContext(s.Context())
	r.mu.Lock()
	r.auth = append(r.auth, strings.Join(md.Get("authorization"), ","))
	r.mu.Unlock()
	s.Send(&pb.StartResponse{Event: &pb.StartResponse_Init{Init: &pb.InitEvent{ProcessId: 1}}})
	return s.Send(&pb.StartResponse{Event: &pb.StartResponse_Exit{Exit: &pb.ExitEvent{ExitCode: 0}}})
}

func TestTokenSentOnGRPCAndREST(t *testing.T) {
	rec := &recorder{}
	gs := grpc.NewServer()
	pb.RegisterProcessServiceServer(gs, rec)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()
	var mu sync.Mutex
	var seen []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok","uptime_seconds":1}`))
	}))
	defer hs.Close()
	t.Setenv("SANDBOXD_TOKEN", "from-env")
	for _, opts := range [][]sandboxd.Option{{sandboxd.WithToken("tok-1")}, {sandboxd.WithToken("")}, nil} {
		opts = append(opts, sandboxd.WithGRPCTarget(lis.Addr().String()), sandboxd.WithRESTURL(hs.URL))
		c, err := sandboxd.New("", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Run(context.Background(), []string{"x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Health(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	want := []string{"Bearer tok-1", "", "Bearer from-env"}
	if strings.Join(rec.auth, "|") != strings.Join(want, "|") || strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("grpc saw %q, http saw %q, want %q", rec.auth, seen, want)
	}
}

func TestDaemonEnforcesToken(t *testing.T) {
	bin := os.Getenv("SANDBOXD_BIN")
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "--token-file") {
		t.Skip("this sandboxd has no --token-file yet (bearer-token auth not built)")
	}
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	os.WriteFile(tf, []byte("right-token\n"), 0o600)
	d, err := startDaemon(bin, dir, "--token-file", tf)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	good := d.client(t, sandboxd.WithToken("right-token"))
	if r, err := good.Run(ctx(t), []string{"echo", "ok"}); err != nil || string(r.Stdout) != "ok\n" {
		t.Fatal(r, err)
	}
	for _, tok := range []string{"wrong-token", ""} {
		bad := d.client(t, sandboxd.WithToken(tok))
		if _, err := bad.Run(ctx(t), []string{"true"}); !errors.Is(err, sandboxd.ErrUnauthenticated) {
			t.Fatalf("token %q: %v", tok, err)
		}
		if _, err := bad.Stat(ctx(t), "x"); !errors.Is(err, sandboxd.ErrUnauthenticated) {
			t.Fatalf("token %q: %v", tok, err)
		}
		if h, err := bad.Health(ctx(t)); err != nil || h.Status != "ok" {
			t.Fatalf("health must stay open: %v", err)
		}
	}
}
