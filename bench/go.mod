module sandboxd.dev/bench

go 1.24

require sigs.k8s.io/agent-sandbox v0.5.6
