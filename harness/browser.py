"""A real browser for the console's tests: Debian's Chromium, headless, driven over WebDriver by chromedriver.

A thin W3C WebDriver client (the protocol is JSON over HTTP): enough to open pages, find elements by CSS,
click, type, read text, wait, and take screenshots. Chromium and chromedriver come from Debian's packages
(`make test` installs them, as it installs Go's).
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from .polling import wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# The key under which WebDriver names an element (the W3C specification's constant).
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class WebDriverError(AssertionError):
    pass


class StaleElement(WebDriverError):
    """The element found is gone: the page re-rendered it."""


class Browser:
    def __init__(self, http: httpx.Client, session: str) -> None:
        self._http = http
        self._session = session

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self._http.request(method, f"/session/{self._session}{path}", json=body)
        value = response.json().get("value")
        if response.status_code != 200:
            stale = isinstance(value, dict) and value.get("error") == "stale element reference"
            raise (StaleElement if stale else WebDriverError)(f"{method} {path}: {value}")
        return value

    def open(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    @property
    def url(self) -> str:
        return self._call("GET", "/url")

    def elements(self, css: str) -> list[str]:
        return [found[ELEMENT] for found in self._call("POST", "/elements", {"using": "css selector", "value": css})]

    def element(self, css: str, timeout: float = 10.0) -> str:
        """The first element `css` selects, once there is one."""
        return wait_for(lambda: next(iter(self.elements(css)), None), timeout, what=f"an element {css!r}")

    def _on(self, css: str, act: Callable[[str], Any], timeout: float = 10.0) -> Any:
        """`act` on the element `css` selects, found again when the page re-rendered it meanwhile."""

        def attempt() -> tuple[Any]:
            return (act(self.element(css, timeout)),)

        return wait_for(attempt, timeout, what=f"{css!r} to hold still", retrying=(StaleElement,))[0]

    def click(self, css: str) -> None:
        self._on(css, lambda element: self._call("POST", f"/element/{element}/click", {}))

    def type(self, css: str, text: str, clear: bool = True) -> None:
        def typed(element: str) -> None:
            if clear:
                self._call("POST", f"/element/{element}/clear", {})
            self._call("POST", f"/element/{element}/value", {"text": text})

        self._on(css, typed)

    def text(self, css: str) -> str:
        return self._on(css, lambda element: self._call("GET", f"/element/{element}/text"))

    def texts(self, css: str) -> list[str]:
        def read() -> tuple[list[str]]:
            return ([self._call("GET", f"/element/{element}/text") for element in self.elements(css)],)

        return wait_for(read, 10, what=f"{css!r} to hold still", retrying=(StaleElement,))[0]

    def attribute(self, css: str, name: str) -> str | None:
        return self._on(css, lambda element: self._call("GET", f"/element/{element}/attribute/{name}"))

    def run(self, script: str, *args: Any) -> Any:
        """A script's value, run in the page (as a function body: `arguments` holds `args`)."""
        return self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_for_text(self, css: str, wanted: str, timeout: float = 15.0) -> str:
        """The text of the first element `css` selects, once it holds `wanted`."""

        def holds() -> str | None:
            found = self.texts(css)
            return next((text for text in found if wanted in text), None)

        return wait_for(holds, timeout, what=f"{css!r} to show {wanted!r}")

    def screenshot(self, path: Path) -> Path:
        """The whole page, scrolled or not, as a PNG at `path` (Chromium's own capture, through the driver)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        metrics = self._cdp("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": metrics["width"], "height": min(metrics["height"], 6000), "scale": 1}
        shot = self._cdp("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def _cdp(self, command: str, params: dict[str, Any]) -> Any:
        return self._call("POST", "/goog/cdp/execute", {"cmd": command, "params": params})

    def console_errors(self) -> list[str]:
        """What the page logged at SEVERE (a script error, a Content-Security-Policy refusal) since last asked."""
        entries = self._call("POST", "/se/log", {"type": "browser"})
        return [entry["message"] for entry in entries if entry.get("level") == "SEVERE"]


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Browser]:
    """A headless Chromium with a profile of its own, closed (and its driver stopped) after use."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if shutil.which(path) is None]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: `make test` installs Debian's chromium and chromium-driver")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    profile = tempfile.mkdtemp(prefix="contextfold-chromium-")
    driver = subprocess.Popen(
        [CHROMEDRIVER, f"--port={port}", "--allowed-ips=127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    session = None
    try:
        wait_for(
            lambda: http.get("/status").json()["value"]["ready"], 20, what="chromedriver", retrying=(httpx.HTTPError,)
        )
        options = {
            "binary": CHROMIUM,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                f"--window-size={width},{height}",
                f"--user-data-dir={profile}",
            ],
        }
        capabilities = {"browserName": "chrome", "goog:chromeOptions": options, "goog:loggingPrefs": {"browser": "ALL"}}
        created = http.post("/session", json={"capabilities": {"alwaysMatch": capabilities}}).json()["value"]
        if "sessionId" not in created:
            raise WebDriverError(f"no browser session: {created}")
        session = created["sessionId"]
        yield Browser(http, session)
    finally:
        if session is not None:
            with contextlib.suppress(httpx.HTTPError):
                http.delete(f"/session/{session}")
        http.close()
        driver.terminate()
        try:
            driver.wait(10)
        except subprocess.TimeoutExpired:
            driver.kill()
        shutil.rmtree(profile, ignore_errors=True)
