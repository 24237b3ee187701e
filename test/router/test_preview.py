"""Preview URLs through sandboxd-router: an app serving HTTP and WebSocket on a port of a sandbox,
reached by the host form http://<port>-<name>.<namespace>.<domain>/ and the path form
/s/<namespace>/<name>/<port>/, by http.client and by headless Chromium (which resolves
*.localhost to loopback itself, so the host form needs no DNS). The router runs in a mount
namespace whose /etc/hosts resolves the sandboxes' DNS form <name>.<ns>.svc.cluster.local to
loopback, as cluster DNS would."""

import asyncio
import http.client
import json
import os
import shutil
import threading
from http import HTTPStatus

import pytest
import websockets

from conftest import wait_until, with_hosts

T = 30.0
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root for a mount namespace")

INDEX = b"""<!doctype html><html><head><script src="app.js"></script></head>
<body><div id="out">waiting</div></body></html>"""
APP = b"""window.addEventListener('load', async () => {
  const out = document.getElementById('out');
  const data = await (await fetch('data.json')).json();
  const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host
                           + location.pathname.replace(/[^/]*$/, '') + 'ws');
  ws.onopen = () => ws.send('ping-' + data.n);
  ws.onmessage = (e) => { out.textContent = 'ok ' + e.data; };
  ws.onerror = () => { out.textContent = 'ws error'; };
});"""


class App:
    """An app in a sandbox: index.html, app.js, data.json over HTTP, an echo at .../ws, and what
    each request looked like."""

    def __init__(self):
        self.seen = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        assert self.ready.wait(T)

    async def _http(self, path, headers):
        self.seen.append((path, dict(headers.raw_items())))
        if path.endswith("/ws"):
            return None
        name = path.split("?")[0].rsplit("/", 1)[-1] or "index.html"
        body = {"index.html": INDEX, "app.js": APP, "data.json": b'{"n": 42}'}.get(name)
        if body is None:
            return HTTPStatus.NOT_FOUND, [], b"no\n"
        kind = {"html": "text/html", "js": "text/javascript", "json": "application/json"}
        return HTTPStatus.OK, [("Content-Type", kind[name.rsplit(".", 1)[1]])], body

    async def _echo(self, ws, path=None):
        async for msg in ws:
            await ws.send(msg)

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def main():
            self.server = await websockets.serve(self._echo, "127.0.0.1", 0,
                                                 process_request=self._http)
            self.port = self.server.sockets[0].getsockname()[1]
            self.ready.set()
            await self.server.wait_closed()

        self.loop.run_until_complete(main())

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)


@pytest.fixture(scope="module")
def app():
    a = App()
    yield a
    a.close()


@pytest.fixture
def prouter(router_factory, tmp_path):
    wrap = with_hosts(tmp_path / "hosts", {"sb.default.svc.cluster.local": "127.0.0.1",
                                            "other.team.svc.cluster.local": "127.0.0.1"})
    return router_factory(["--preview-domain", "preview.test"], wrap=wrap)


def get(router, path, host):
    c = http.client.HTTPConnection("127.0.0.1", router.port, timeout=T)
    c.request("GET", path, headers={"Host": host})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


def test_host_form_reaches_the_port(prouter, app):
    app.seen.clear()
    r, body = get(prouter, "/data.json?x=1", f"{app.port}-sb.default.preview.test:{prouter.port}")
    assert r.status == 200 and json.loads(body) == {"n": 42}
    path, hdrs = app.seen[-1]
    assert path == "/data.json?x=1"
    assert dict(hdrs)["X-Forwarded-Host"] == f"{app.port}-sb.default.preview.test:{prouter.port}"
    r, body = get(prouter, "/", f"{app.port}-other.team.preview.test")
    assert r.status == 200 and b"app.js" in body


def test_path_form_reaches_the_port(prouter, app):
    app.seen.clear()
    r, body = get(prouter, f"/s/team/other/{app.port}/data.json?y=2", "anything.example")
    assert r.status == 200 and json.loads(body) == {"n": 42}
    assert app.seen[-1][0] == "/data.json?y=2"
    r, _ = get(prouter, f"/s/team/other/{app.port}?q=1", "anything.example")
    assert r.status == 308 and r.getheader("Location") == f"/s/team/other/{app.port}/?q=1"


@pytest.mark.parametrize("host,path,detail", [
    ("sb.default.preview.test", "/", "Invalid preview URL"),
    ("8080-sb.preview.test", "/", "Invalid preview URL"),
    ("8080-Bad.default.preview.test", "/", "Invalid sandbox ID format."),
    ("99999-sb.default.preview.test", "/", "Invalid port format."),
    ("x.example", "/s/default/sb", "Invalid preview URL"),
])
def test_bad_preview_urls_refused(prouter, host, path, detail):
    r, body = get(prouter, path, host)
    assert r.status == 400 and json.loads(body)["detail"].startswith(detail), body


def test_header_routing_wins_over_a_preview_host(prouter, app):
    c = http.client.HTTPConnection("127.0.0.1", prouter.port, timeout=T)
    c.request("GET", "/data.json", headers={
        "Host": "1-nothing.default.preview.test", "X-Sandbox-ID": "sb",
        "X-Sandbox-Pod-IP": "127.0.0.1", "X-Sandbox-Port": str(app.port)})
    assert c.getresponse().status == 200
    c.close()


@pytest.fixture
def browser():
    if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
        pytest.skip("chromium and chromium-driver are not installed (scripts/setup.sh does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-proxy-server"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        yield drv
    finally:
        drv.quit()


def page_text(drv):
    return drv.execute_script("return document.getElementById('out') ? "
                              "document.getElementById('out').textContent : ''")


def test_preview_in_chromium_host_and_path_forms(router_factory, tmp_path, app, browser):
    wrap = with_hosts(tmp_path / "hosts", {"sb.default.svc.cluster.local": "127.0.0.1"})
    r = router_factory(["--preview-domain", "localhost"], wrap=wrap)
    for url in (f"http://{app.port}-sb.default.localhost:{r.port}/",
                f"http://127.0.0.1:{r.port}/s/default/sb/{app.port}/"):
        browser.get(url)
        wait_until(lambda: page_text(browser) != "waiting", T, interval=0.1,
                   what=f"the page at {url} to run")
        assert page_text(browser) == "ok ping-42", (url, page_text(browser))
