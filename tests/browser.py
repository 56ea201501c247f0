"""A dashboard process and a headless Chromium for the dashboard's tests and benchmarks.

Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``, ``/usr/bin/chromedriver``;
``.ci/run`` installs them) driven by Selenium; :class:`Dashboard` is the process ``hermesctl
dashboard`` started for a test daemon, and plain HTTP requests to it."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness import DaemonProc

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def chromium(width: int = 1200, height: int = 900) -> Any:
    """A headless Chromium under Selenium (``driver.quit()`` ends it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console: CSP violations land there
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    return driver


class Dashboard:
    """The dashboard process ``hermesctl dashboard`` started: its URL, token and pid."""

    def __init__(self, daemon: DaemonProc):
        """Start it (``hermesctl dashboard --listen 127.0.0.1:0``) and wait until it serves."""
        out = daemon.ctl("dashboard", "--listen", "127.0.0.1:0")
        assert out.returncode == 0, out.stderr
        self.url = out.stdout.strip()
        self.base, self.token = self.url.split("?token=")
        self.base = self.base.rstrip("/")
        self.pid = json.loads((daemon.runtime / "dashboard.json").read_text())["pid"]

    def http(self, path: str, data: dict | None = None, headers: dict | None = None, token: bool = True):
        """``(status, body)`` of one request (a POST when ``data``), with the bearer token unless not ``token``."""
        body = None if data is None else "&".join(f"{k}={urllib.request.quote(str(v))}" for k, v in data.items()).encode()
        heads = {**({"Authorization": f"Bearer {self.token}"} if token else {}), **(headers or {})}
        if body is not None:
            heads["Content-Type"] = "application/x-www-form-urlencoded"
        request = urllib.request.Request(self.base + path, data=body, headers=heads)
        try:
            with urllib.request.urlopen(request, timeout=15) as answer:
                return answer.status, answer.read(200_000).decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def stop(self) -> None:
        """SIGTERM it (it removes its state file)."""
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


