"""The HTML report in a real headless Chromium: renders, runs its script, shows the verdict.

Chromium runs directly (no webdriver): once with --dump-dom to read the DOM after load (the
page's inline script writes data-js / data-img-count / data-img-broken on <body>), once with
--screenshot. With --enable-logging=stderr every console message (log, warn, error,
uncaught exceptions) appears on stderr as an ``INFO:CONSOLE`` line; Chromium logs them all
at INFO, so the report must emit no console message at all. A control page proves that
console errors are seen. Needs the Debian packages chromium and chromium-driver.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from quantkit.report.render import render_reports

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless browser test needs /usr/bin/chromium "
           "(apt-get install -y chromium chromium-driver)")

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0")


def chromium(tmp_path: Path, page: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *extra,
                           page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=180)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def body_attrs(dom: str) -> dict[str, str]:
    m = re.search(r"<body([^>]*)>", dom)
    assert m, dom[:500]
    return dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))


def test_control_page_console_errors_are_seen(tmp_path):
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><html><body><script>console.error("control-error");'
                    'notDefined();</script></body></html>')
    r = chromium(tmp_path, page, "--dump-dom")
    lines = console_lines(r.stderr)
    assert any("control-error" in line for line in lines), r.stderr[-2000:]
    assert any("Uncaught ReferenceError" in line for line in lines), r.stderr[-2000:]


@pytest.mark.parametrize("fixture, n_plots", [("record", 3), ("record_search", 4)])
def test_report_renders_in_chromium(request, tmp_path, fixture, n_plots):
    record = request.getfixturevalue(fixture)
    html = render_reports(record, tmp_path / "report", formats=("html",))["html"]
    assert html.read_text().count('<img src="data:image/png;base64,') == n_plots

    dom_run = chromium(tmp_path, html, "--dump-dom")
    assert dom_run.returncode == 0, dom_run.stderr[-2000:]
    assert console_lines(dom_run.stderr) == []
    dom = dom_run.stdout
    attrs = body_attrs(dom)
    assert attrs.get("data-js") == "ok"                    # the inline script ran
    assert attrs.get("data-img-count") == str(n_plots)     # every plot is an <img> in the DOM
    assert attrs.get("data-img-broken") == "0"             # and every data URI decoded
    assert len(re.findall(r"<img\b", dom)) == n_plots
    hero = re.search(r'id="recommended">(.*?)</div>\s*</div>', dom, re.S)
    rec = record["recommended"]
    assert hero and rec in hero.group(1)
    assert f'>{record["candidates"][rec]["verdict"]["status"]}<' in hero.group(1)
    for name, c in record["candidates"].items():
        if c.get("verdict"):
            assert re.search(rf'data-candidate="{re.escape(name)}">.*?>{c["verdict"]["status"]}</span>',
                             dom, re.S), name

    shot = tmp_path / "report.png"
    shot_run = chromium(tmp_path, html, f"--screenshot={shot}", "--window-size=1280,4000")
    assert shot_run.returncode == 0, shot_run.stderr[-2000:]
    assert console_lines(shot_run.stderr) == []
    assert shot.is_file() and shot.read_bytes().startswith(b"\x89PNG")
    assert shot.stat().st_size > 10_000
