"""
lens.py's HTML page in a real browser: headless Chromium driven over its DevTools protocol (CDP) on a
pipe (--remote-debugging-pipe: JSON messages ending in a NUL byte on file descriptors 3 and 4, so no
websocket package is needed). The page loads without console errors or network requests, shows the
model's tokens, and hovering a token highlights exactly that token's attention row, which changes
with the token and with the head chosen.
"""

import base64
import json
import os
import select
import shutil
import subprocess
import time

import pytest

import lens
from test_lens import TEXT, write_out_dir

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--remote-debugging-pipe"]


class Chromium:
    """A headless Chromium and its DevTools protocol: send() a command and get its result; events are kept."""

    def __init__(self, profile, timeout=60):
        to_browser, self.w = os.pipe()
        self.r, from_browser = os.pipe()

        def on_fds_3_and_4():  # in the child: the protocol's fixed descriptors (dup2 also clears close-on-exec)
            a, b = os.dup(to_browser), os.dup(from_browser)  # out of the way first, in case one already is 3 or 4
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     preexec_fn=on_fds_3_and_4,
                                     close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.timeout, self.buf, self.events, self.n = timeout, b"", [], 0

    def _read(self, deadline):
        while b"\0" not in self.buf:
            ready, _, _ = select.select([self.r], [], [], max(0.0, deadline - time.time()))
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self.r, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed its DevTools pipe")
            self.buf += chunk
        message, _, self.buf = self.buf.partition(b"\0")
        return json.loads(message)

    def send(self, method, session=None, **params):
        self.n += 1
        message = {"id": self.n, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.w, json.dumps(message).encode() + b"\0")
        deadline = time.time() + self.timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def wait_for(self, method):
        deadline = time.time() + self.timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read(deadline))

    def close(self):
        try:
            self.send("Browser.close")
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.r)
        os.close(self.w)


def open_page(browser, path):
    """A new tab with console, log and network events on, showing path; returns the tab's session."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        browser.send(f"{domain}.enable", session)
    browser.send("Page.navigate", session, url=f"file://{path}")
    browser.wait_for("Page.loadEventFired")
    return session


def js(browser, session, expression):
    result = browser.send("Runtime.evaluate", session, expression=expression, returnByValue=True)
    assert "exceptionDetails" not in result, result
    return result["result"].get("value")


def hover(browser, session, k):
    """Move the mouse onto the middle of token k, as a user would."""
    x, y = js(browser, session, f"(() => {{ const r = document.querySelectorAll('.tok')[{k}]"
                                f".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
    browser.send("Input.dispatchMouseEvent", session, type="mouseMoved", x=x, y=y)


WEIGHTS = "[...document.querySelectorAll('.tok')].map(s => s.dataset.w === undefined ? null : +s.dataset.w)"


def expected_row(att, layer, head, k):
    row = [round(w, 3) for w in att[layer, head, k, :k + 1].tolist()]
    return row + [0] * (att.size(-1) - k - 1)


def test_page_in_headless_chromium(tmp_path):
    write_out_dir(tmp_path)
    page = tmp_path / "lens.html"
    r = lens.main([f"--out_dir={tmp_path}", f"--start={TEXT}", f"--html={page}", "--png="])
    att = r["att"]
    browser = Chromium(tmp_path / "profile")
    try:
        session = open_page(browser, page)
        shown = js(browser, session, "[...document.querySelectorAll('.tok')].map(s => s.textContent)")
        assert shown == [lens.show(t) for t in r["tokens"]]  # the model's own tokens, one span each
        assert js(browser, session, WEIGHTS) == [None] * len(shown)  # not hovering: surprise colours only
        mean = js(browser, session, "document.getElementById('mean').textContent")
        assert mean == f"{r['losses'].mean().item():.3f}"

        hover(browser, session, 20)
        first = js(browser, session, WEIGHTS)
        assert first == expected_row(att, 0, 0, 20)
        hover(browser, session, 40)
        second = js(browser, session, WEIGHTS)
        assert second != first and second == expected_row(att, 0, 0, 40)
        # another layer and head: the same token's row of that head
        js(browser, session, "['layer', 'head'].forEach(id => { const s = document.getElementById(id); "
                             "s.value = '1'; s.dispatchEvent(new Event('change')); })")
        hover(browser, session, 41)
        hover(browser, session, 40)
        assert js(browser, session, WEIGHTS) == expected_row(att, 1, 1, 40)
        info = js(browser, session, "document.getElementById('info').innerText")
        assert "token 40" in info and "layer 1 head 1" in info and "block 1" in info  # the logit lens rows
        # a click on a row of the heads' table shows that head: layer 0 head 1's row of token 40
        js(browser, session, "document.querySelector('#stats tr[data-l=\"0\"][data-h=\"1\"]').click()")
        assert js(browser, session, "document.getElementById('head').value") == "1"
        hover(browser, session, 39)
        hover(browser, session, 40)
        assert js(browser, session, WEIGHTS) == expected_row(att, 0, 1, 40)
        losses = js(browser, session, "[...document.querySelectorAll('#lensloss td:last-child')].map(t => +t.textContent)")
        assert losses == [round(x, 4) for x in r["lens_loss"].tolist()]
        shot = base64.b64decode(browser.send("Page.captureScreenshot", session, format="png")["data"])
        assert shot.startswith(b"\x89PNG") and len(shot) > 10000  # a page drawn, not a blank one

        errors = [e for e in browser.events if e.get("method") == "Runtime.exceptionThrown"
                  or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
                  or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
        assert errors == []
        urls = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
        assert urls and all(u.startswith("file:") for u in urls), urls  # the page alone, nothing from a network
    finally:
        browser.close()
