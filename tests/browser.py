"""A minimal Chrome DevTools Protocol client for tests: headless Chromium (Debian's ``chromium`` package) driven
over its browser websocket with the ``websockets`` sync client.

One connection to the browser; a page is a target attached with ``flatten``, so its commands and events carry
its ``sessionId`` on that same connection. Events are kept in arrival order, so that a test can read every
``Network.requestWillBeSent`` a page caused.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = "chromium"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
         # no traffic of the browser's own: updates, sync, metrics, first-run pages
         "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--metrics-recording-only", "--no-default-browser-check")
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")
MISSING = (f"`{CHROMIUM}` is not installed: .ci/run installs it (apt-get install chromium), as the HTML report "
           "tests need a real browser")


class DevToolsError(RuntimeError):
    """A DevTools command answered with an error, or an awaited answer or event did not come in time."""


@dataclass
class Browser:
    """A running Chromium and the websocket to it."""

    process: subprocess.Popen
    connection: ClientConnection
    events: list[dict] = field(default_factory=list)
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30) -> dict:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        number = next(self.ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.connection.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline, method)
            if reply.get("id") == number:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def wait_for(self, event: str, session: str | None = None, timeout: float = 30, since: int = 0) -> dict:
        """The first event named ``event`` (of ``session``) from the ``since``-th event kept on, waiting for it if it
        has not come yet."""
        seen = since
        deadline = time.monotonic() + timeout
        while True:
            for message in self.events[seen:]:
                if message.get("method") == event and message.get("sessionId") == session:
                    return message.get("params", {})
            seen = len(self.events)
            self._receive(deadline, event)

    def _receive(self, deadline: float, waiting_for: str) -> dict:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DevToolsError(f"{waiting_for}: no answer from Chromium in time")
        try:
            message = json.loads(self.connection.recv(timeout=left))
        except TimeoutError:
            raise DevToolsError(f"{waiting_for}: no answer from Chromium in time") from None
        if "method" in message:
            self.events.append(message)
        return message


@dataclass
class Page:
    """A tab of the browser, attached as its own session."""

    browser: Browser
    session: str
    url: str

    def call(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        return self.browser.call(method, params, self.session, timeout)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (returned by value)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise DevToolsError(f"Runtime.evaluate: {result['exceptionDetails']}")
        return result["result"].get("value")

    def requests(self) -> list[str]:
        """The URL of every request the page made since Network was enabled (before it navigated)."""
        return [e["params"]["request"]["url"] for e in self.browser.events
                if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == self.session]

    def screenshot(self, width: int) -> bytes:
        """A PNG of the whole page at ``width`` CSS pixels and scale 1: the viewport grows to the page's height."""
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        return base64.b64decode(data)


def start(profile: Path, timeout: float = 30) -> tuple[subprocess.Popen, str]:
    """Start headless Chromium with a fresh profile folder: the process and its DevTools websocket address."""
    binary = shutil.which(CHROMIUM)
    if binary is None:
        raise FileNotFoundError(MISSING)
    profile.mkdir(parents=True, exist_ok=True)
    log = profile.parent / f"{profile.name}.stderr"
    with log.open("wb") as err:  # a file, not a pipe: Chromium never blocks on a full pipe nobody reads
        process = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                   start_new_session=True)
    try:
        return process, _devtools_url(process, log, timeout)
    except BaseException:
        stop(process)
        raise


def _devtools_url(process: subprocess.Popen, log: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = LISTENING.search(log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise DevToolsError(f"Chromium exited ({process.returncode}) before listening: "
                                f"{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    raise DevToolsError(f"Chromium did not print its DevTools address in {timeout:g}s: "
                        f"{log.read_text(errors='replace')[-2000:]}")


def stop(process: subprocess.Popen, grace: float = 0) -> None:
    """End the Chromium this module started: ``grace`` seconds to exit by itself, then it and the helper
    processes of its own process group are killed."""
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@contextmanager
def chromium(profile: Path, timeout: float = 30) -> Iterator[Browser]:
    """A running browser, connected, for the ``with`` block; killed at its end, whatever happened."""
    process, url = start(profile, timeout)
    grace = 0.0
    try:
        with connect(url, max_size=None, open_timeout=timeout) as connection:
            browser = Browser(process, connection)
            try:
                yield browser
            finally:
                with suppress(Exception):  # asked to close, it reaps its own helpers
                    connection.send(json.dumps({"id": next(browser.ids), "method": "Browser.close"}))
                    grace = 5.0
    finally:
        stop(process, grace)


def open_page(browser: Browser, url: str, width: int = 1200, timeout: float = 30) -> Page:
    """A new tab that records its network requests from before it navigates to ``url``, once ``url`` loaded."""
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    page = Page(browser, session, url)
    page.call("Network.enable")
    page.call("Page.enable")
    page.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                     "mobile": False})
    since = len(browser.events)
    navigated = page.call("Page.navigate", {"url": url})
    if navigated.get("errorText"):
        raise DevToolsError(f"Page.navigate {url}: {navigated['errorText']}")
    browser.wait_for("Page.loadEventFired", session, timeout, since)
    return page
