"""A small Kubernetes API client for the tests: JSON over HTTPS with a bearer token, nothing
more. Each call carries a timeout; watches are read line by line with a bounded wait."""

import http.client
import json
import ssl
import urllib.parse

TIMEOUT = 15.0


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body.get('message', body) if isinstance(body, dict) else body}")
        self.status = status
        self.body = body


# Where each kind lives: (path prefix, plural, namespaced)
KINDS = {
    ("v1", "Namespace"): ("/api/v1", "namespaces", False),
    ("v1", "Node"): ("/api/v1", "nodes", False),
    ("v1", "Pod"): ("/api/v1", "pods", True),
    ("v1", "Service"): ("/api/v1", "services", True),
    ("v1", "Secret"): ("/api/v1", "secrets", True),
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts", True),
    ("v1", "PersistentVolumeClaim"): ("/api/v1", "persistentvolumeclaims", True),
    ("v1", "PersistentVolume"): ("/api/v1", "persistentvolumes", False),
    ("storage.k8s.io/v1", "StorageClass"): ("/apis/storage.k8s.io/v1", "storageclasses", False),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments", True),
    ("apps/v1", "ReplicaSet"): ("/apis/apps/v1", "replicasets", True),
    ("policy/v1", "PodDisruptionBudget"): ("/apis/policy/v1", "poddisruptionbudgets", True),
    ("coordination.k8s.io/v1", "Lease"): ("/apis/coordination.k8s.io/v1", "leases", True),
    ("node.k8s.io/v1", "RuntimeClass"): ("/apis/node.k8s.io/v1", "runtimeclasses", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    ("rbac.authorization.k8s.io/v1", "Role"): ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    ("agents.x-k8s.io/v1beta1", "Sandbox"): ("/apis/agents.x-k8s.io/v1beta1", "sandboxes", True),
    ("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate"): ("/apis/extensions.agents.x-k8s.io/v1beta1", "sandboxtemplates", True),
    ("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim"): ("/apis/extensions.agents.x-k8s.io/v1beta1", "sandboxclaims", True),
    ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool"): ("/apis/extensions.agents.x-k8s.io/v1beta1", "sandboxwarmpools", True),
    ("kwok.x-k8s.io/v1alpha1", "PortForward"): ("/apis/kwok.x-k8s.io/v1alpha1", "portforwards", True),
}
# The deprecated v1alpha1 of our kinds, served beside v1beta1.
KINDS.update({(api.replace("v1beta1", "v1alpha1"), kind):
              (prefix.replace("v1beta1", "v1alpha1"), plural, namespaced)
              for (api, kind), (prefix, plural, namespaced) in list(KINDS.items())
              if api.endswith("agents.x-k8s.io/v1beta1")})


def path_of(api_version, kind, namespace=None, name=None, sub=None):
    prefix, plural, namespaced = KINDS[(api_version, kind)]
    p = prefix
    if namespaced and namespace:
        p += f"/namespaces/{namespace}"
    p += f"/{plural}"
    if name:
        p += f"/{name}"
    if sub:
        p += f"/{sub}"
    return p


class Kube:
    def __init__(self, host, port, ca_file, token):
        self.host, self.port, self.token = host, port, token
        self.ctx = ssl.create_default_context(cafile=ca_file)
        self.warnings = []  # the Warning headers of the last answer

    def _conn(self, timeout=TIMEOUT):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method, path, body=None, content_type="application/json", ok=(200, 201, 202)):
        conn = self._conn()
        try:
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            self.warnings = [v for k, v in resp.getheaders() if k.lower() == "warning"]
            try:
                out = json.loads(raw) if raw else None
            except ValueError:
                out = raw.decode(errors="replace")
            if resp.status not in ok:
                raise ApiError(resp.status, out)
            return out
        finally:
            conn.close()

    def get(self, api_version, kind, namespace, name):
        return self.request("GET", path_of(api_version, kind, namespace, name))

    def find(self, api_version, kind, namespace, name):
        """The object, or None when it does not exist."""
        try:
            return self.get(api_version, kind, namespace, name)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version, kind, namespace=None, selector=None):
        q = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
        return self.request("GET", path_of(api_version, kind, namespace) + q)["items"]

    def create(self, obj):
        md = obj["metadata"]
        return self.request("POST", path_of(obj["apiVersion"], obj["kind"], md.get("namespace")), obj)

    def apply(self, obj):
        """Creates obj, or replaces the existing one (keeping its resourceVersion)."""
        md = obj["metadata"]
        cur = self.find(obj["apiVersion"], obj["kind"], md.get("namespace"), md["name"])
        if cur is None:
            return self.create(obj)
        obj = dict(obj, metadata=dict(md, resourceVersion=cur["metadata"]["resourceVersion"]))
        return self.request("PUT", path_of(obj["apiVersion"], obj["kind"], md.get("namespace"), md["name"]), obj)

    def patch(self, api_version, kind, namespace, name, patch, sub=None):
        return self.request("PATCH", path_of(api_version, kind, namespace, name, sub), patch,
                            content_type="application/merge-patch+json")

    def delete(self, api_version, kind, namespace, name):
        try:
            return self.request("DELETE", path_of(api_version, kind, namespace, name))
        except ApiError as e:
            if e.status != 404:
                raise
