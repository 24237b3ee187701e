package sandboxd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
	"github.com/sandboxd/sandboxd/sdk/go/internal/testdaemon"
)

// daemon is the real sandboxd of these tests.
type daemon struct{ *testdaemon.Daemon }

var shared *daemon

func TestMain(m *testing.M) {
	bin, why := testdaemon.Binary()
	if bin == "" {
		fmt.Println("SKIP:", why)
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "sdk-go-")
	if err != nil {
		panic(err)
	}
	shared, err = startDaemon(bin, dir)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	os.Setenv("SANDBOXD_GRPC_PORT", strconv.Itoa(shared.GRPCPort))
	os.Setenv("SANDBOXD_REST_PORT", strconv.Itoa(shared.RESTPort))
	code := m.Run()
	if err := shared.Stop(); err != nil {
		fmt.Println(err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func startDaemon(bin, dir string, extra ...string) (*daemon, error) {
	d, err := testdaemon.Start(bin, dir, extra...)
	if err != nil {
		return nil, err
	}
	return &daemon{d}, nil
}

func (d *daemon) stop() error { return d.Stop() }

func (d *daemon) client(t testing.TB, opts ...sandboxd.Option) *sandboxd.Client {
	t.Helper()
	opts = append([]sandboxd.Option{sandboxd.WithGRPCPort(d.GRPCPort), sandboxd.WithRESTPort(d.RESTPort),
		sandboxd.WithTimeout(20 * time.Second)}, opts...)
	c, err := sandboxd.New("127.0.0.1", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ctx is a test's context, bounded.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return c
}

// area is a fresh directory under the root for one test, relative to the root.
func area(t testing.TB) string {
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(t.Name(), "_")
	if err := os.MkdirAll(filepath.Join(shared.Root, name), 0o755); err != nil {
		t.Fatal(err)
	}
	return name
}
