package k8s_test

import (
	"context"

	"github.com/sandboxd/sandboxd/sdk/go/k8s"
)

// claimAndRun is the README's lifecycle example (TestClaimRunRelease runs it): claim a
// sandbox from a warm pool, wait until it is Ready, run a command in it, give it back.
func claimAndRun(ctx context.Context, namespace, pool string) (string, error) {
	kc, err := k8s.New(k8s.Config{Namespace: namespace}) // $KUBECONFIG, or in-cluster
	if err != nil {
		return "", err
	}
	lease, err := kc.Claim(ctx, pool)
	if err != nil {
		return "", err
	}
	defer lease.Delete(context.Background()) // the controller deletes the sandbox with it
	if err := lease.WaitReady(ctx); err != nil {
		return "", err
	}
	c, err := lease.Connect() // pod IP, the pod's sandboxd ports, the sandbox's token
	if err != nil {
		return "", err
	}
	defer c.Close()
	r, err := c.Run(ctx, []string{"echo", "hello from", lease.Sandbox})
	if err != nil {
		return "", err
	}
	return string(r.Stdout), nil
}
