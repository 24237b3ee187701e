"""The terminal page in a real browser: Debian's Chromium, headless, driven through chromedriver.

It types into xterm.js and reads the screen back, resizes the window and sees the pty follow,
drops the WebSocket and finds the screen intact after the reconnect with no byte doubled, has a
second client attached to the same terminal see the same bytes, and uses the file panel. A
screenshot of the page is kept next to the build (test-artifacts/terminal.png)."""

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest
import websockets

from conftest import own_home_env, Procs, http_request, wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(
    not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)),
    reason="chromium and chromium-driver are not installed (scripts/setup.sh installs them)")

WAIT = 20.0


daemon_env = own_home_env  # login shells here must not read this machine's dotfiles


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=900,600", "--no-proxy-server"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    drv.set_script_timeout(10)
    try:
        yield drv
    finally:
        drv.quit()


def artifacts():
    d = Path(os.environ.get("SANDBOXD_BIN", "/tmp/x/sandboxd/sandboxd")).resolve().parents[1]
    p = d / "test-artifacts"
    p.mkdir(parents=True, exist_ok=True)
    return p


def js(drv, expr):
    return drv.execute_script("return " + expr)


def screen(drv):
    return js(drv, "window.sbx ? window.sbx.screen() : ''")


def type_keys(drv, text):
    from selenium.webdriver.common.by import By

    drv.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea").send_keys(text)


def attached(drv):
    return js(drv, "window.sbx && window.sbx.state.ws && window.sbx.state.ws.readyState === 1 "
                   "&& window.sbx.state.id !== null")


def test_terminal_page_in_chromium(sandboxd, protos, browser):
    procs = Procs(sandboxd.client().channel, protos)
    base = f"http://127.0.0.1:{sandboxd.rest_port}/ui/"
    browser.get(base)
    wait_until(lambda: attached(browser), WAIT, what="the page attached to a new shell")
    pid = js(browser, "window.sbx.state.id")
    # As a person would, type once the shell shows its prompt (what is typed before a shell sets
    # up its line editor may be thrown away).
    wait_until(lambda: screen(browser).rstrip().endswith(("#", "$")), WAIT, what="a prompt")

    # Typing reaches the shell; its output reaches the screen.
    type_keys(browser, "echo hello-$((6*7))\n")
    wait_until(lambda: "hello-42" in screen(browser), WAIT, what="hello-42 on the screen")

    # The pty follows the window: tput cols prints what xterm.js fitted to.
    cols_before = js(browser, "window.sbx.term.cols")
    browser.set_window_size(1300, 700)
    wait_until(lambda: js(browser, "window.sbx.term.cols") > cols_before, WAIT, what="refit")
    cols = js(browser, "window.sbx.term.cols")
    type_keys(browser, "echo cols=$(tput cols)\n")
    wait_until(lambda: f"cols={cols}" in screen(browser), WAIT, what=f"cols={cols}")

    # A dropped connection: the page comes back from the last byte it rendered.
    type_keys(browser, "echo before-drop\n")
    wait_until(lambda: screen(browser).count("before-drop") == 2, WAIT, what="before-drop")
    js(browser, "window.sbx.drop()")
    procs.write(pid, b"echo while-away-$((5+5))\n")  # output the page is not there to see
    wait_until(lambda: "while-away-10" in screen(browser) and attached(browser), WAIT,
               what="reconnected with what came while away")
    text = screen(browser)
    assert text.count("hello-42") == 1, text
    assert text.count("before-drop") == 2, text  # the command and its output, once each
    # Every byte of the process's output rendered exactly once.
    wait_until(lambda: js(browser, "window.sbx.state.received") == procs.get(pid).stdout.end,
               WAIT, what="bytes rendered == bytes written")
    browser.save_screenshot(str(artifacts() / "terminal.png"))

    # A second client of the same terminal (not a browser) sees the same bytes.
    async def second():
        async with websockets.connect(
                f"ws://127.0.0.1:{sandboxd.rest_port}/v1/processes/{pid}/terminal?offset=0") as ws:
            data = b""
            while b"second-3" not in data:
                m = await asyncio.wait_for(ws.recv(), WAIT)
                if isinstance(m, bytes):
                    data += m
                elif json.loads(m)["type"] == "attached" and not data:
                    type_keys(browser, "echo second-$((1+2))\n")
            return data

    data = asyncio.run(second())
    out, _, _, _, _ = procs.attach(pid, follow=False)
    assert out.startswith(data)
    wait_until(lambda: "second-3" in screen(browser), WAIT, what="second-3 in the page too")
    type_keys(browser, "exit\n")
    wait_until(lambda: "exited" in js(browser, "document.getElementById('status').textContent"),
               WAIT, what="the exit shown")


def test_file_panel_lists_uploads_and_updates(sandboxd, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(f"http://127.0.0.1:{sandboxd.rest_port}/ui/")

    def names():
        return set(js(browser, "[...document.querySelectorAll('#entries li')]"
                               ".map(li => li.dataset.name)"))

    wait_until(lambda: attached(browser), WAIT, what="attached")
    # The panel follows the directory watch (Server-Sent Events), not a poll.
    wait_until(lambda: js(browser, "window.sbx.watch") == "live", WAIT, what="the watch live")
    # A file made from outside the page shows up without a reload.
    assert http_request(sandboxd.rest_port, "PUT", "/v1/files/made-outside.txt",
                        body=b"x", timeout=5).status == 204
    wait_until(lambda: "made-outside.txt" in names(), WAIT, what="made-outside.txt listed")
    # The page uploads a file.
    src = tmp_path / "from-browser.txt"
    src.write_bytes(b"uploaded by chromium\n")
    browser.find_element(By.ID, "upload").send_keys(str(src))
    wait_until(lambda: (sandboxd.root / "from-browser.txt").exists(), WAIT, what="upload")
    assert (sandboxd.root / "from-browser.txt").read_bytes() == b"uploaded by chromium\n"
    wait_until(lambda: "from-browser.txt" in names(), WAIT, what="upload listed")
