"""Real OCI registries on loopback for the controller's image lookups: the `distribution`
registry (built by scripts/k8s-tools.sh from its Go module), open, behind htpasswd (Basic), or
behind a Bearer token service run here (JWTs signed with a key made at start, which the registry
trusts through its rootcertbundle), and images pushed to them with crane: a random layer, a
chosen entrypoint and cmd, a platform, an index of several.

The registry's access log (one line per request) is what tests count fetches by. crane pushes
to an open registry of its own on the same storage (`push_host`): it refuses a token realm on a
loopback address, and the registry under test keeps in its log only what the controller asked."""

import base64
import datetime
import http.server
import json
import os
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

import sbxtest

TOOLS = sbxtest.tools_dir()
SERVICE = "sbx-test-registry"
ISSUER = "sbx-test-tokens"
# The pusher may push and pull anything; the reader pulls anything; anonymous pulls pub/ only.
PUSHER = ("pusher", "push-pw")
READER = ("reader", "read-pw")


def missing_tools():
    return [t for t in ("registry", "crane") if not os.access(TOOLS / t, os.X_OK)]


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class TokenServer:
    """A Docker token service: GET /token?service=&scope=repository:NAME:ACTIONS answers a JWT
    granting what the caller (Basic credentials, or none) may do."""

    def __init__(self, d):
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(hours=1))
                     .not_valid_after(now + datetime.timedelta(days=2))
                     .sign(self.key, hashes.SHA256()))
        self.bundle = Path(d) / "token-ca.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.handle(self)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.realm = f"http://127.0.0.1:{self.port}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def allowed(self, user, repo, actions):
        if user in (PUSHER[0],):
            return actions
        if user == READER[0]:
            return [a for a in actions if a == "pull"]
        return [a for a in actions if a == "pull" and repo.startswith("pub/")]

    def handle(self, req):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(req.path).query)
        user = None
        auth = req.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
            if (u, p) not in (PUSHER, READER):
                req.send_response(401)
                req.end_headers()
                return
            user = u
        self.requests.append((user, q.get("scope", [""])[0]))
        access = []
        for scope in q.get("scope", []):
            for one in scope.split(" "):
                kind, _, rest = one.partition(":")
                repo, _, actions = rest.rpartition(":")
                if kind == "repository":
                    access.append({"type": kind, "name": repo,
                                   "actions": self.allowed(user, repo, actions.split(","))})
        body = json.dumps({"token": self.jwt(user or "", access), "expires_in": 300}).encode()
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def jwt(self, sub, access):
        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": sub, "aud": SERVICE, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing}.{b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


class Registry:
    """A `distribution` registry on 127.0.0.1:port (plain HTTP); auth None, "basic" (htpasswd
    with READER and PUSHER) or a TokenServer."""

    def __init__(self, d, name, port=None, auth=None, storage=None):
        self.dir = Path(d) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or sbxtest.free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.log = self.dir / "registry.log"
        self.data = storage or self.dir / "data"
        cfg = {"version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": False}},
               "storage": {"filesystem": {"rootdirectory": str(self.data)}},
               "http": {"addr": self.host, "secret": uuid.uuid4().hex}}
        self.pusher = None if auth is None else Registry(d, f"{name}-push", storage=self.data)
        self.push_host = self.pusher.host if self.pusher else self.host
        if auth == "basic":
            htpasswd = self.dir / "htpasswd"
            htpasswd.write_text("".join(f"{u}:{bcrypt(p)}\n" for u, p in (PUSHER, READER)))
            cfg["auth"] = {"htpasswd": {"realm": "sbx-test", "path": str(htpasswd)}}
        elif auth is not None:
            cfg["auth"] = {"token": {"realm": auth.realm, "service": SERVICE, "issuer": ISSUER,
                                     "rootcertbundle": str(auth.bundle)}}
        (self.dir / "config.json").write_text(json.dumps(cfg))
        self.p = None

    def start(self):
        if self.pusher:
            self.pusher.start()
        # The registry reads YAML, of which JSON is a part.
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen([str(TOOLS / "registry"), "serve", str(self.dir / "config.json")],
                                      stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

        def up():
            assert self.p.poll() is None, self.log.read_text(errors="replace")[-2000:]
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2)
            except urllib.error.HTTPError:
                pass  # 401: up, and asking for credentials
            return True
        sbxtest.wait_until(up, 30, interval=0.1, what=f"registry {self.host} up",
                           retry=(OSError,))
        return self

    def stop(self):
        if self.pusher:
            self.pusher.stop()
        if self.p and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)

    def gets(self, pattern):
        """The access log's GET requests whose path matches the regular expression pattern."""
        lines = self.log.read_text(errors="replace").splitlines()
        paths = [m.group(1) for m in (re.search(r'"GET (\S+) HTTP/[0-9.]+" 200 ', l) for l in lines) if m]
        return [p for p in paths if re.search(pattern, p)]


def bcrypt(password):
    """A bcrypt hash (the only kind the registry's htpasswd reads), from glibc's libxcrypt
    through Python's crypt module; the lowest cost keeps each request cheap."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))


class Crane:
    """crane with a Docker config of its own."""

    def __init__(self, d):
        self.dir = Path(d) / "crane"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, DOCKER_CONFIG=str(self.dir), HOME=str(self.dir))

    def __call__(self, *args):
        r = subprocess.run([str(TOOLS / "crane"), *args], env=self.env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"crane {' '.join(args)}: {r.stderr}"
        return r.stdout.strip()

    def image(self, ref, entrypoint=None, cmd=None, platform="linux/amd64"):
        """Pushes a new image of one random layer with this entrypoint and cmd to ref (which ends
        in a tag); returns its manifest digest."""
        layer = self.dir / f"layer-{uuid.uuid4().hex}.tar"
        payload = self.dir / "payload"
        payload.write_bytes(os.urandom(64))
        subprocess.run(["tar", "-cf", str(layer), "-C", str(self.dir), "payload"], check=True)
        # Built under a tag of its own: ref names the finished image only (a lookup between the
        # two pushes must not find the image without its entrypoint).
        tmp = f"{ref.rpartition(':')[0]}:tmp-{uuid.uuid4().hex[:12]}"
        self("append", "--insecure", "-f", str(layer), "-t", tmp)
        layer.unlink()
        args = ["mutate", "--insecure", tmp, "--set-platform", platform, "-t", ref]
        if entrypoint is not None:
            args.append("--entrypoint=" + ",".join(entrypoint))
        if cmd is not None:
            args.append("--cmd=" + ",".join(cmd))
        self(*args)
        return self.digest(ref)

    def index(self, ref, *manifests):
        self("index", "append", "--insecure", *[a for m in manifests for a in ("-m", m)], "-t", ref)
        return self.digest(ref)

    def digest(self, ref):
        return self("digest", "--insecure", ref)

    def config_digest(self, ref, platform="linux/amd64"):
        m = json.loads(self("manifest", "--insecure", "--platform", platform, ref))
        return m["config"]["digest"]

    def tag(self, ref, tag):
        self("tag", "--insecure", ref, tag)


def dockerconfigjson(host, user):
    """A kubernetes.io/dockerconfigjson Secret's data for user (name, password) at host."""
    auth = base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
    cfg = {"auths": {host: {"auth": auth}}}
    return {".dockerconfigjson": base64.b64encode(json.dumps(cfg).encode()).decode()}
