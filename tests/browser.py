"""Open a local page in headless Chromium and watch it as a person's browser would: console
errors, uncaught exceptions and every network request, then read values and take a screenshot.

Speaks the DevTools protocol over Chromium's ``--remote-debugging-pipe`` (file descriptors 3
and 4, messages ended by a NUL byte), so it needs nothing beyond the standard library and the
``chromium`` binary."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")
TIMEOUT_S = 60.0


def find_chromium() -> str | None:
    """The path of a Chromium binary on PATH (or ``$CHROMIUM``), None when there is none."""
    env = os.environ.get("CHROMIUM")
    if env and shutil.which(env):
        return shutil.which(env)
    return next((shutil.which(c) for c in CANDIDATES if shutil.which(c)), None)


@dataclass
class Visit:
    """What the page did: console errors and exceptions, URLs it requested, values read, a screenshot."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    screenshot_png: bytes = b""


class Browser:
    """One headless Chromium process driven over the DevTools pipe."""

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="fleetplan-chromium-")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()

        def fds() -> None:  # in the child: the protocol's descriptors 3 (commands in) and 4 (replies out)
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)
            for fd in (3, 4):  # dup2 onto itself keeps close-on-exec: clear it
                os.set_inheritable(fd, True)

        args = [binary, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--metrics-recording-only", "--mute-audio",
                f"--user-data-dir={self.profile}", "--window-size=1280,900", "about:blank"]
        # descriptors are kept open (close_fds=False) so that 3 and 4, set up in the child, survive
        self.proc = subprocess.Popen(args, preexec_fn=fds, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply (events seen meanwhile are kept)."""
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_child, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _read(self) -> dict[str, Any]:
        """The next message from the browser."""
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self.from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def wait_for(self, method: str) -> dict[str, Any]:
        """Wait for the event ``method`` (keeping every event seen)."""
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._read()
            self.events.append(e)
            if e.get("method") == method:
                return e

    def close(self) -> None:
        """End the browser and remove its profile."""
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_child)
        os.close(self.from_child)
        shutil.rmtree(self.profile, ignore_errors=True)


def visit(binary: str, page: Path, expressions: dict[str, str]) -> Visit:
    """Load ``page`` (a local file), wait for it to load, evaluate each of ``expressions`` and
    take a full-page screenshot; console errors, exceptions and requests are recorded."""
    b = Browser(binary)
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            b.send(f"{domain}.enable", session=session)
        b.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        b.wait_for("Page.loadEventFired")
        out = Visit()
        for name, expr in expressions.items():
            r = b.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=session)
            out.values[name] = r.get("result", {}).get("value")
        shot = b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False}, session=session)
        out.screenshot_png = base64.b64decode(shot["data"])
        _record(b.events, out)
        return out
    finally:
        b.close()


def _record(events: list[dict[str, Any]], out: Visit) -> None:
    """Console errors, exceptions, log errors and requested URLs out of ``events``."""
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif m == "Runtime.exceptionThrown":
            out.errors.append("exception: " + p["exceptionDetails"].get("text", ""))
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.errors.append("log: " + p["entry"]["text"])
        elif m == "Network.requestWillBeSent":
            out.requests.append(p["request"]["url"])
