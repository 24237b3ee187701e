"""Claims a sandbox from a warm pool, runs a command in it and gives it back (the README's
lifecycle example; the controller tests run it against a real control plane).

    KUBECONFIG=... python3 lifecycle.py POOL      # namespace: $SANDBOX_NAMESPACE or the context's
"""

import os
import sys

from sandboxd.k8s import SandboxClient

pool = sys.argv[1]
with SandboxClient(namespace=os.environ.get("SANDBOX_NAMESPACE")) as client:
    with client.claim(pool, timeout=120) as sb:  # waits Ready, connects; deletes the claim on exit
        print(f"claimed {sb.sandbox_name} at {sb.pod_ip}:{sb.grpc_port}")
        print(sb.run(["echo", "hello from", sb.sandbox_name], timeout=30).stdout_text.strip())
