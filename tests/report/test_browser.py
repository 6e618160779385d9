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


def _text(html: str) -> str:
    """The page's text: tags dropped, entities as written, whitespace collapsed."""
    import html as html_lib

    body = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", body)))


def test_dev_only_candidates_read_not_signed_off_in_chromium(record_signed, tmp_path):
    """Issue 24, point 10: in the page as Chromium renders it, every dev-only candidate
    reads "not signed off" wherever its verdict is shown (card, candidates table, verdict
    reasons, the delta plot's caption), no dev-only candidate shows a bare PASS badge, and
    the recommended banner says that the engine check has NOT run and what to run."""
    record = record_signed
    signed = set(record["signoff"]["family"]["candidates"])
    dev_only = [n for n, c in record["candidates"].items() if c.get("verdict") and n not in signed]
    assert dev_only and record["recommended"] in signed
    html = render_reports(record, tmp_path / "report", formats=("html",))["html"]
    run = chromium(tmp_path, html, "--dump-dom")
    assert run.returncode == 0 and console_lines(run.stderr) == [], run.stderr[-2000:]
    dom = run.stdout
    for name in dev_only:
        status = record["candidates"][name]["verdict"]["status"]
        card = re.search(rf'data-candidate="{re.escape(name)}">(.*?)</div>\s*</div>', dom, re.S)
        assert card and f"{status} on dev; not signed off" in _text(card.group(1)), name
        assert 'class="badge dev"' in card.group(1), name
        rows = [r for r in re.findall(r"<tr>(.*?)</tr>", dom, re.S)
                if re.search(rf">\s*{re.escape(name)}\s*<", r) and "badge" in r]
        assert rows and all("not signed off" in _text(r) for r in rows), name
        # no badge of this candidate anywhere says a bare PASS / INCONCLUSIVE / FAIL
        for r in rows:
            assert not re.search(r'class="badge (pass|fail|inconclusive)"', r), name
        summary = re.search(rf"<summary>\s*{re.escape(name)}: (.*?)</summary>", dom, re.S)
        assert summary is None or "not signed off" in _text(summary.group(1)), name
    caption = re.search(r'id="plot-delta">.*?<figcaption>(.*?)</figcaption>', dom, re.S)
    assert caption and "not signed off" in _text(caption.group(1))
    assert all(name in caption.group(1) for name in dev_only)
    for name in signed:  # the signed-off members show their test verdict as it is
        card = re.search(rf'data-candidate="{re.escape(name)}">(.*?)</div>\s*</div>', dom, re.S)
        assert card and "not signed off" not in _text(card.group(1)), name
    hero = re.search(r'id="recommended">(.*?)</div>\s*(?:<h2|</section>)', dom, re.S)
    text = _text(hero.group(1))
    assert "Engine check NOT run" in text and "backend=trt" in text and "target GPU" in text

    shot = tmp_path / "report.png"
    run = chromium(tmp_path, html, f"--screenshot={shot}", "--window-size=1280,1400")
    assert run.returncode == 0 and shot.read_bytes().startswith(b"\x89PNG")
