"""A headless Chromium driven over the DevTools protocol, for the viewer's tests, benchmark and screenshots.

Why a pipe and no library: `--remote-debugging-pipe` speaks the protocol as NUL-separated JSON on file
descriptors 3 (commands in) and 4 (replies and events out), so the standard library is the whole client:
no websocket package and no browser download (Playwright's own Chromium is not available offline).
The browser is the OS package (`apt-get install chromium`); `find_chromium` says where it is.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from prbench.errors import PrbenchError


def find_chromium() -> str | None:
    """The chromium binary on PATH (Debian: chromium; Ubuntu's older name: chromium-browser)."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _high(fd: int) -> int:
    """`fd` moved above 9, so putting one end on 3 or 4 in the child never overwrites the other."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return new


class Browser:
    """One headless Chromium with one page; `call` sends a command and returns its result, collecting events."""

    def __init__(self, width: int = 1400, height: int = 900, binary: str | None = None, timeout: float = 60.0) -> None:
        exe = binary or find_chromium()
        if exe is None:
            raise PrbenchError("chromium is not installed (apt-get install chromium)")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="prbench-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        to_child_r, from_child_w = _high(to_child_r), _high(from_child_w)
        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--mute-audio",
                f"--window-size={width},{height}", "about:blank"]
        def fds() -> None:  # in the child: the protocol's fixed descriptors (dup2 leaves them inheritable)
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(args, preexec_fn=fds, close_fds=False, stdin=subprocess.DEVNULL,  # noqa: PLW1509
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable")
        self.resize(width, height)

    # -- the protocol
    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise PrbenchError("chromium did not answer within the timeout")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise PrbenchError("chromium closed its DevTools pipe (it exited)")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        return msg

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise PrbenchError(f"chromium: {method}: {reply['error'].get('message')}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str, since: int = 0) -> dict[str, Any]:
        """The first event `method` at or after index `since` of `events` (read until it comes)."""
        deadline = time.monotonic() + self.timeout
        while True:
            for ev in self.events[since:]:
                if ev["method"] == method:
                    return ev
            if time.monotonic() > deadline:
                raise PrbenchError(f"chromium: no {method} within the timeout")
            msg = self._read()
            if "method" in msg:
                self.events.append(msg)

    # -- what tests and the benchmark do
    def resize(self, width: int, height: int = 900) -> None:
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})

    def goto(self, url: str) -> None:
        """Navigate and wait for the load event (none comes for a change of the fragment only: no loader)."""
        mark = len(self.events)
        if "loaderId" in self.call("Page.navigate", {"url": url}):
            self.wait_event("Page.loadEventFired", mark)

    def reload(self) -> None:
        mark = len(self.events)
        self.call("Page.reload", {"ignoreCache": True})
        self.wait_event("Page.loadEventFired", mark)

    def eval(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise PrbenchError(f"chromium: {expression[:80]}: {res['exceptionDetails'].get('text')} "
                               f"{res['exceptionDetails'].get('exception', {}).get('description', '')}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise PrbenchError(f"chromium: `{expression}` stayed false for {timeout:g} s")
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the first box of the first element matching `selector`."""
        box = self.eval(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: 'center'}}); const r = e.getClientRects()[0];
            return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
        if box is None:
            raise PrbenchError(f"chromium: nothing matches {selector!r} to click")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left",
                                                   "clickCount": 1})

    def screenshot(self, path: str | Path, full: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full:
            size = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size[0], "height": size[1],
                                                           "scale": 1})
        out = Path(path)
        out.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", params)["data"]))
        return out

    def requested(self) -> list[str]:
        """Every URL the page asked for so far (documents, scripts, styles, images, fetches)."""
        return [ev["params"]["request"]["url"] for ev in self.events if ev["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False)
        except (PrbenchError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
