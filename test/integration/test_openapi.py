"""api/openapi.yaml, the OpenAPI 3.0.3 document of the REST API: it loads and is consistent,
documents every route the daemon serves (from its route table and by probing the live daemon),
the daemon's JSON answers match its schemas, and schemathesis finds no server error nor
undocumented status, content type or body against a live daemon.

schemathesis comes from PyPI into a venv (scripts/setup.sh): $SANDBOXD_SCHEMATHESIS, else
~/.cache/sandboxd/venv/bin/schemathesis, else `schemathesis` on PATH.
"""

import os
import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from conftest import REPO, http_request

yaml = pytest.importorskip("yaml", reason="PyYAML (Debian python3-yaml) is needed to read the "
                                          "OpenAPI document")

SPEC = REPO / "api" / "openapi.yaml"
ROUTES_C = REPO / "sandboxd" / "src" / "http" / "http_routes.c"
METHODS = ("get", "head", "put", "post", "delete", "patch", "options", "trace")
T = 5.0


@pytest.fixture(scope="module")
def doc():
    with open(SPEC) as f:
        return yaml.safe_load(f)


def resolve(doc, node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), f"external $ref {ref}"
        cur = doc
        for part in ref[2:].split("/"):
            assert part in cur, f"dangling $ref {ref}"
            cur = cur[part]
        node = cur
    return node


def operations(doc):
    for path, item in doc["paths"].items():
        for m in METHODS:
            if m in item:
                yield path, m, item[m]


# ---------------------------------------------------------------------------------------------
# The document itself


def test_document_loads_and_is_consistent(doc):
    assert doc["openapi"] == "3.0.3"
    assert doc["info"]["title"] and doc["info"]["version"]
    # Every $ref resolves.
    def walk(n):
        if isinstance(n, dict):
            if "$ref" in n:
                resolve(doc, n)
            for v in n.values():
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)
    walk(doc)
    ids = [op["operationId"] for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids)), "operationIds must be unique"
    for path, item in doc["paths"].items():
        assert path.startswith("/")
        allowed = set(METHODS) | {"parameters", "summary", "description", "servers"}
        assert set(item) <= allowed, (path, set(item) - allowed)
        templated = set(re.findall(r"\{(\w+)\}", path))
        for m in METHODS:
            if m not in item:
                continue
            op = item[m]
            params = [resolve(doc, p) for p in item.get("parameters", []) + op.get("parameters", [])]
            declared = {p["name"] for p in params if p["in"] == "path"}
            assert declared == templated, (path, m, declared, templated)
            for p in params:
                assert p["in"] in ("path", "query", "header", "cookie"), p
                assert "schema" in p, p
                if p["in"] == "path":
                    assert p.get("required") is True, p
            assert op.get("responses"), (path, m)
            for code, resp in op["responses"].items():
                assert re.fullmatch(r"[1-5]\d\d|default", str(code)), (path, m, code)
                resp = resolve(doc, resp)
                assert resp.get("description"), (path, m, code)
                for ctype, media in resp.get("content", {}).items():
                    assert "schema" in media, (path, m, code, ctype)
                    if ctype == "application/json":
                        resolve(doc, media["schema"])
                if m == "head":
                    assert "content" not in resp, f"HEAD {path} {code} documents a body"
            if "requestBody" in op:
                rb = resolve(doc, op["requestBody"])
                assert rb["content"], (path, m)


# What the brief of the REST API promises, route by route: these must be documented.
EXPECTED = {
    ("/v1/files/{path}", "get"): {"200", "206", "304", "403", "404", "416"},
    ("/v1/files/{path}", "head"): {"200", "304", "404", "403"},
    ("/v1/files/{path}", "put"): {"200", "204", "400", "403", "413", "507"},
    ("/v1/files/{path}", "delete"): {"204", "400", "403", "404", "409"},
    ("/v1/files/", "delete"): {"204", "409", "400"},
    ("/v1/stat/{path}", "get"): {"200", "403", "404"},
    ("/v1/dirs/{path}", "put"): {"201", "400", "403", "404", "409"},
    ("/v1/move", "post"): {"204", "400", "403", "404", "409"},
    ("/v1/health", "get"): {"200", "503"},
    ("/v1/metadata", "get"): {"200"},
    ("/healthz", "get"): {"200"},
    ("/readyz", "get"): {"200", "503"},
    ("/metrics", "get"): {"200"},
}


def test_documented_statuses_headers_and_schemas(doc):
    for (path, m), codes in EXPECTED.items():
        op = doc["paths"][path][m]
        missing = codes - {str(c) for c in op["responses"]}
        assert not missing, f"{m.upper()} {path}: statuses not documented: {missing}"
    files = doc["paths"]["/v1/files/{path}"]
    ok204 = resolve(doc, files["put"]["responses"]["204"])
    assert {"X-Sandboxd-Size", "X-Sandboxd-Sha256", "Repr-Digest"} <= set(ok204["headers"])
    assert "Content-Range" in resolve(doc, files["get"]["responses"]["206"])["headers"]
    assert "Content-Range" in resolve(doc, files["get"]["responses"]["416"])["headers"]
    ok200 = resolve(doc, files["get"]["responses"]["200"])
    assert {"application/octet-stream", "application/json", "application/x-tar"} <= \
        set(ok200["content"])
    assert {"Accept-Ranges", "ETag", "Last-Modified"} <= set(ok200["headers"])
    body = resolve(doc, files["put"]["requestBody"])["content"]
    assert "file" in resolve(doc, body["multipart/form-data"]["schema"])["properties"]
    qp = {resolve(doc, p)["name"] for p in files["put"]["parameters"]}
    assert {"mode", "archive"} <= qp
    assert "recursive" in {resolve(doc, p)["name"] for p in files["delete"]["parameters"]}
    assert {"Range", "If-Range", "If-None-Match", "If-Modified-Since"} <= \
        {resolve(doc, p)["name"] for p in files["get"]["parameters"]}
    dirs = {resolve(doc, p)["name"] for p in doc["paths"]["/v1/dirs/{path}"]["put"]["parameters"]}
    assert {"parents", "mode"} <= dirs
    s = doc["components"]["schemas"]
    assert set(s["Error"]["properties"]["code"]["enum"]) >= {
        "PERMISSION_DENIED", "NOT_FOUND", "INVALID_ARGUMENT", "CONFLICT", "PAYLOAD_TOO_LARGE",
        "INSUFFICIENT_STORAGE", "METHOD_NOT_ALLOWED", "INTERNAL", "UNAVAILABLE"}
    assert set(s["FileEntry"]["required"]) == {"name", "size", "type", "modified_at", "mode"}
    assert set(s["Stat"]["properties"]) == {"path", "name", "type", "size", "mode", "uid", "gid",
                                           "modified_at", "symlink_target", "path_base64",
                                           "name_base64", "symlink_target_base64"}
    assert "name_base64" in s["FileEntry"]["properties"]
    assert set(s["Health"]["required"]) == {"status", "uptime_seconds"}
    assert set(s["MoveRequest"]["properties"]) == {"from", "to", "overwrite"}


# ---------------------------------------------------------------------------------------------
# Every route the daemon serves is documented


def _doc_matches(doc, concrete):
    """The documented path templates matching a concrete path ({param} = one or more chars)."""
    out = []
    for tpl in doc["paths"]:
        rx = "^" + re.sub(r"\\\{\w+\\\}", ".+", re.escape(tpl)) + "$"
        if re.match(rx, concrete):
            out.append(tpl)
    return out


def test_route_table_is_documented(doc):
    """Every entry of the daemon's route table (sandboxd/src/http/http_routes.c) and its methods."""
    src = ROUTES_C.read_text()
    table = re.search(r"routes\[\]\s*=\s*\{(.*?)\n\};", src, re.S)
    assert table, "route table not found in http_routes.c"
    routes = re.findall(r'\{\s*"(/[^"]*)",\s*"([A-Z ]+)",\s*\w+\s*(?:,\s*\w+\s*)?\}',
                        table.group(1))
    assert len(routes) >= 9, routes
    problems = []
    for prefix, methods in routes:
        wanted = {m.lower() for m in methods.split()}
        paths = [prefix]
        if prefix.endswith("/"):
            paths.append(prefix + "{path}")
            # A prefix route that serves named templates only (/v1/processes/{id}/terminal).
            under = [t for t in doc["paths"] if t.startswith(prefix) and "{" in t]
            if not set(paths) & set(doc["paths"]) and under:
                paths = under
        for p in paths:
            # A prefix route: its templated form, or its bare form, documented with every method.
            if p not in doc["paths"]:
                problems.append(f"{p} (route {prefix!r}) is not documented")
                continue
            have = {m for m in METHODS if m in doc["paths"][p]}
            if have != wanted:
                problems.append(f"{p}: documented {sorted(have)}, served {sorted(wanted)}")
    assert not problems, "\n".join(problems)


CANDIDATES = [
    "/", "/v1", "/v1/", "/v1/files", "/v1/files/", "/v1/files/x", "/v1/files/a/b",
    "/v1/stat", "/v1/stat/", "/v1/stat/x", "/v1/dirs", "/v1/dirs/", "/v1/dirs/x",
    "/v1/move", "/v1/move/", "/v1/move/x", "/v1/health", "/v1/health/", "/v1/metadata",
    "/v1/metadata/", "/healthz", "/healthz/", "/readyz", "/readyz/", "/metrics", "/metrics/",
    "/v1/upload", "/v1/download", "/v1/list", "/v1/exists", "/upload", "/download", "/list",
    "/exists", "/v1/processes", "/v1/exec", "/v1/version", "/version", "/openapi.yaml",
    "/openapi.json", "/v1/openapi.yaml", "/debug/pprof/", "/v1/archive", "/v1/tar",
    "/v2/files/x", "/v1/FILES/x", "/v1/filesx", "/v1/statx", "/v1/health/x",
]
PROBE_METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS")


def test_live_routes_are_documented(doc, sandboxd_factory):
    """Probes the live daemon: every (path, method) it serves must be documented, and every
    documented one must be served (neither 405 nor an unknown route)."""
    d = sandboxd_factory()
    served, problems = set(), []
    for path in CANDIDATES:
        for m in PROBE_METHODS:
            r = http_request(d.rest_port, m, path, body=b"" if m in ("PUT", "POST", "PATCH") else None,
                             timeout=T)
            unknown = r.status == 404 and r.body and r.json().get("message") == "no such route"
            if m == "HEAD" and r.status == 404:
                # No body to tell an unknown route from a missing file: ask with GET.
                g = http_request(d.rest_port, "GET", path, timeout=T)
                unknown = g.status == 404 and g.json().get("message") == "no such route"
            if unknown or r.status == 405:
                continue
            served.add((path, m))
            tpls = _doc_matches(doc, path)
            if not any(m.lower() in doc["paths"][t] for t in tpls):
                problems.append(f"{m} {path} answers {r.status} but is not documented")
    for path, m, _ in operations(doc):
        concrete = path.replace("{path}", "x")
        if (concrete, m.upper()) not in served and concrete in CANDIDATES:
            problems.append(f"{m.upper()} {path} is documented but not served")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# The daemon's JSON answers match the documented schemas (a small JSON Schema checker for the
# keywords the document uses)


def check_schema(doc, schema, value, where="$"):
    schema = resolve(doc, schema)
    errs = []
    t = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool}
    if t == "integer":
        if not (isinstance(value, int) and not isinstance(value, bool)):
            return [f"{where}: {value!r} is not an integer"]
    elif t in types and not isinstance(value, types[t]):
        return [f"{where}: {value!r} is not {t}"]
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{where}: {value!r} not in {schema['enum']}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errs.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if "minimum" in schema and value < schema["minimum"]:
        errs.append(f"{where}: {value} < {schema['minimum']}")
    if schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            errs.append(f"{where}: {value!r} is not a date-time")
    if t == "object":
        for k in schema.get("required", []):
            if k not in value:
                errs.append(f"{where}: missing {k}")
        props = schema.get("properties", {})
        for k, v in value.items():
            if k in props:
                errs += check_schema(doc, props[k], v, f"{where}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{where}: unexpected {k}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errs += check_schema(doc, schema["additionalProperties"], v, f"{where}.{k}")
    if t == "array":
        for i, v in enumerate(value):
            errs += check_schema(doc, schema["items"], v, f"{where}[{i}]")
    return errs


def _response_schema(doc, path, method, status, ctype="application/json"):
    resp = resolve(doc, doc["paths"][path][method]["responses"][str(status)])
    return resp["content"][ctype]["schema"]


def test_json_answers_match_schemas(doc, sandboxd_factory):
    d = sandboxd_factory()
    (d.root / "dir1" / "sub").mkdir(parents=True)
    (d.root / "dir1" / "a.txt").write_text("hello")
    (d.root / "dir1" / "ln").symlink_to("a.txt")
    cases = [
        ("GET", "/v1/files/dir1", None, "/v1/files/{path}", 200),
        ("GET", "/v1/files/", None, "/v1/files/", 200),
        ("GET", "/v1/files/missing", None, "/v1/files/{path}", 404),
        ("GET", "/v1/files/%2e%2e/x", None, "/v1/files/{path}", 403),
        ("PUT", "/v1/files/dir1?mode=9", b"", "/v1/files/{path}", 400),
        ("DELETE", "/v1/files/dir1", None, "/v1/files/{path}", 409),
        ("GET", "/v1/stat/dir1/a.txt", None, "/v1/stat/{path}", 200),
        ("GET", "/v1/stat/dir1/ln", None, "/v1/stat/{path}", 200),
        ("GET", "/v1/stat/", None, "/v1/stat/", 200),
        ("PUT", "/v1/dirs/dir1", None, "/v1/dirs/{path}", 409),
        ("POST", "/v1/move", b"{}", "/v1/move", 400),
        ("GET", "/v1/health", None, "/v1/health", 200),
        ("GET", "/v1/metadata", None, "/v1/metadata", 200),
    ]
    problems = []
    for method, url, body, tpl, status in cases:
        r = http_request(d.rest_port, method, url, body=body, timeout=T)
        if r.status != status:
            problems.append(f"{method} {url}: {r.status}, expected {status}: {r.body[:200]!r}")
            continue
        errs = check_schema(doc, _response_schema(doc, tpl, method.lower(), status), r.json())
        problems += [f"{method} {url}: {e}" for e in errs]
    r = http_request(d.rest_port, "PUT", "/v1/files/t?archive=tar", body=b"\0" * 1024, timeout=T)
    if r.status != 200:
        problems.append(f"PUT of an empty tar: {r.status} {r.body[:200]!r}")
    else:
        problems += check_schema(doc, _response_schema(doc, "/v1/files/{path}", "put", 200), r.json())
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# schemathesis against a live daemon


def _schemathesis():
    for cand in (os.environ.get("SANDBOXD_SCHEMATHESIS"),
                 str(Path.home() / ".cache/sandboxd/venv/bin/schemathesis"),
                 shutil.which("schemathesis")):
        if cand and os.access(cand, os.X_OK):
            return cand
    pytest.fail("schemathesis not found (run scripts/setup.sh, or set SANDBOXD_SCHEMATHESIS)")


def test_schemathesis(sandboxd_factory, tmp_path):
    st = _schemathesis()
    d = sandboxd_factory()
    (d.root / "dir1" / "sub").mkdir(parents=True)
    (d.root / "dir1" / "a.txt").write_text("hello world\n")
    argv = [st, "run", str(SPEC), "--url", d.rest_url,
            "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                        "response_schema_conformance",
            "--max-examples", "25", "--seed", "1", "--workers", "1", "--request-timeout", "10",
            "--max-failures", "10", "--no-shrink", "--generation-database", "none",
            "--suppress-health-check", "all", "--no-color",
            # A watch streams until its client goes: test_watch.py checks it.
            "--exclude-path-regex", "^/v1/watch"]
    env = dict(os.environ, NO_COLOR="1", SCHEMATHESIS_TELEMETRY="false", NO_PROXY="*",
               no_proxy="*")
    t0 = time.monotonic()
    try:
        cp = subprocess.run(argv, cwd=tmp_path, capture_output=True, timeout=75, env=env)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        pytest.fail(f"schemathesis ran over 75s:\n{out[-6000:]}")
    took = time.monotonic() - t0
    out = cp.stdout.decode(errors="replace") + cp.stderr.decode(errors="replace")
    print(f"\nschemathesis: exit {cp.returncode} in {took:.1f}s\n" + out[-1500:])
    assert d.alive(), "sandboxd died under schemathesis"
    assert cp.returncode == 0, f"schemathesis found problems (exit {cp.returncode}):\n" + \
        out[-12000:]
