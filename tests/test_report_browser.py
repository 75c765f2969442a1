"""`statstorm report` in a real browser: headless Chromium (Debian's `chromium`, installed by
`scripts/setup.sh --dev`) opens the report of a real demo run's results (the synthetic demo
in tests/fixtures/report/demo/), and over the DevTools protocol (on a pipe: no port, no
extra package) the test checks that every chart rendered with a non-zero size, that nothing
but the page itself was loaded, and that the page logged no error. The screenshot is kept:
its path is printed (set STATSTORM_ARTEFACTS=DIR to keep it in DIR).
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

FIX = Path(__file__).parent / "fixtures" / "report"
CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--window-size=1200,900"]
WAIT_S = 90.0  # a bound on a stuck browser, not a measurement

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(scripts/setup.sh --dev installs it)")


class DevTools:
    """The DevTools protocol over Chromium's pipe: fd 3 is its input, fd 4 its output,
    each message JSON ended by a NUL byte."""

    def __init__(self, user_data: Path) -> None:
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def fds() -> None:
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen([str(CHROMIUM), *FLAGS, f"--user-data-dir={user_data}",
                                      "about:blank"], pass_fds=(3, 4), preexec_fn=fds,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_r, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return dict(json.loads(msg))

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: bool = True) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + WAIT_S
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return dict(m.get("result") or {})
            if "method" in m:
                self.events.append(m)

    def wait_for(self, method: str) -> None:
        if any(e["method"] == method for e in self.events):
            return
        deadline = time.monotonic() + WAIT_S
        while True:
            m = self._read(deadline)
            if "method" in m:
                self.events.append(m)
                if m["method"] == method:
                    return

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False)
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # by its PID
            self.proc.wait(15)
        os.close(self._to_w)
        os.close(self._from_r)


CHARTS_JS = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(s => {
  const r = s.getBoundingClientRect();
  return {id: s.id, width: r.width, height: r.height, shapes: s.querySelectorAll('path, rect, use, text').length,
          title: (s.querySelector('title') || {}).textContent || ''};
}))"""


def test_report_renders_in_chromium_offline_without_errors(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    run_cli(["report", str(FIX / "demo" / "demo.json"), "-o", str(report)], tmp_path,
            check=True)
    expected = re.findall(r'<svg id="([^"]+)"', report.read_text())
    assert len(expected) >= 6
    artefacts = Path(os.environ.get("STATSTORM_ARTEFACTS") or tmp_path)
    artefacts.mkdir(parents=True, exist_ok=True)
    shot = artefacts / "report-chromium.png"
    dt = DevTools(tmp_path / "chromium-profile")
    try:
        target = dt.call("Target.createTarget", {"url": "about:blank"}, session=False)
        dt.session = dt.call("Target.attachToTarget", {"targetId": target["targetId"],
                                                       "flatten": True}, session=False)["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            dt.call(f"{domain}.enable")
        dt.call("Page.navigate", {"url": report.as_uri()})
        dt.wait_for("Page.loadEventFired")
        charts = json.loads(dt.call("Runtime.evaluate", {"expression": CHARTS_JS,
                                                          "returnByValue": True})["result"]["value"])
        png = dt.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        shot.write_bytes(base64.b64decode(png["data"]))
    finally:
        dt.close()
    print(f"\nscreenshot of the report in Chromium: {shot}")
    # every chart is in the DOM, drawn, and sized
    assert [c["id"] for c in charts] == expected
    for c in charts:
        assert c["width"] > 100 and c["height"] > 50 and c["shapes"] > 10, c
        assert c["title"], c
    # nothing fetched but the page itself: no network, no other file
    requested = [e["params"]["request"]["url"] for e in dt.events
                 if e["method"] == "Network.requestWillBeSent"]
    assert requested == [report.as_uri()], requested
    # no console errors, no exceptions, no errors the browser logged (e.g. a bad SVG attribute)
    errors = [e for e in dt.events
              if (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in
                  ("error", "assert", "warning"))
              or e["method"] == "Runtime.exceptionThrown"
              or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] in
                  ("error", "warning"))]
    assert errors == []
    assert shot.stat().st_size > 10_000
