package main

import (
	"context"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Routing keys through a sandboxd-router (bench/router.sh): every measuring subcommand sends
// what SBXBENCH_GRPC_METADATA says on its gRPC calls and what SBXBENCH_HTTP_HEADERS says on its
// HTTP requests. Both are "Name: value" pairs separated by ";" (unset: none, a daemon reached
// directly).

// routeKeys parses the pairs of environment variable name.
func routeKeys(name string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(os.Getenv(name), ";") {
		k, v, ok := strings.Cut(kv, ":")
		if ok && strings.TrimSpace(k) != "" {
			out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
		}
	}
	return out
}

// httpHeaderLines are the routing headers as request head lines, each ending in CRLF.
func httpHeaderLines() string {
	var b strings.Builder
	for _, kv := range routeKeys("SBXBENCH_HTTP_HEADERS") {
		b.WriteString(kv[0] + ": " + kv[1] + "\r\n")
	}
	return b.String()
}

// wrkHeaderArgs are the routing headers as wrk's -H arguments.
func wrkHeaderArgs() []string {
	var out []string
	for _, kv := range routeKeys("SBXBENCH_HTTP_HEADERS") {
		out = append(out, "-H", kv[0]+": "+kv[1])
	}
	return out
}

// routeDialOptions add the gRPC routing metadata to every call of a connection.
func routeDialOptions() []grpc.DialOption {
	var md []string
	for _, kv := range routeKeys("SBXBENCH_GRPC_METADATA") {
		md = append(md, strings.ToLower(kv[0]), kv[1])
	}
	if len(md) == 0 {
		return nil
	}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return inv(metadata.AppendToOutgoingContext(ctx, md...), method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return s(metadata.AppendToOutgoingContext(ctx, md...), desc, cc, method, opts...)
	}
	return []grpc.DialOption{grpc.WithUnaryInterceptor(unary), grpc.WithStreamInterceptor(stream)}
}
