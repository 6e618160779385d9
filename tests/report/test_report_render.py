"""render_reports on the real (trimmed) record and on records with missing sections."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from builders import latency

from quantkit.errors import ConfigError, RecordError
from quantkit.record.run_record import RunRecord
from quantkit.report.render import render_reports

IMG = re.compile(r'<img [^>]*src="data:image/png;base64,[A-Za-z0-9+/]+=*"')


def _render(record, out: Path, **kw) -> dict[str, str]:
    paths = render_reports(record, out, **kw)
    return {fmt: p.read_text(encoding="utf-8") for fmt, p in paths.items()}


def _verdicts(record) -> dict[str, str]:
    return {n: c["verdict"]["status"] for n, c in record["candidates"].items() if c.get("verdict")}


def test_writes_three_files_and_json_is_the_record(record, tmp_path):
    paths = render_reports(record, tmp_path)
    assert set(paths) == {"json", "md", "html"}
    assert {p.name for p in tmp_path.iterdir()} == {"report.json", "report.md", "report.html"}
    assert json.loads(paths["json"].read_text()) == record


def test_real_record_report_holds_what_a_reviewer_signs(record, tmp_path):
    out = _render(record, tmp_path)
    verdicts = _verdicts(record)
    assert set(verdicts.values()) == {"PASS", "INCONCLUSIVE", "FAIL"}  # the fixture covers all three
    margin = record["candidates"]["int8.minmax"]["verdict"]["margin"]
    shas = [record["model"]["sha256"], *record["data"]["sha256"].values(),
            *record["artifacts"].values(),
            *(c["artifact_sha256"] for c in record["candidates"].values() if "artifact_sha256" in c)]
    for fmt in ("md", "html"):
        text = out[fmt]
        assert "int8.minmax" in text and record["recommended"] == "int8.minmax"
        assert record["command"] in text
        assert margin["kind"] in text and "0.007694" in text  # margin kind and absolute margin
        for sha in shas:
            assert sha in text, (fmt, sha)
        for name in record["artifacts"]:
            assert f"  {name}" in text  # SHA256SUMS lines
        assert "required n" in text and "12180" in text and "5247" in text
        assert record["candidates"]["int8.minmax"]["first_diverging"] in text
        assert "Sign-off" in text and "approve" in text and "reject" in text
        assert "Latency: not measured" in text
        assert "Precision search: not run" in text
    # each candidate's verdict next to its name
    for name, status in verdicts.items():
        assert re.search(rf"\| `{re.escape(name)}`(?: ★)? \| \*\*{status}\*\*", out["md"]), name
        card = re.search(rf'data-candidate="{re.escape(name)}">(.*?)</div>\s*</div>', out["html"], re.S)
        assert card and f">{status}</span>" in card.group(1), name
    # verdict and recommendation come first
    html = out["html"]
    assert html.index('id="recommended"') < html.index('id="thresholds"') < html.index('id="provenance"')
    md = out["md"]
    assert md.index("## Recommended: `int8.minmax` — **PASS**") < md.index("## Declared thresholds")
    # one inline PNG per plot: delta CI, per-layer SQNR, activation summary (no search here)
    assert len(IMG.findall(html)) == 3
    assert len(IMG.findall(md)) == 3
    for plot_id in ("plot-delta", "plot-sqnr", "plot-activations"):
        assert f'id="{plot_id}"' in html


def test_html_is_self_contained(record, tmp_path):
    html = _render(record, tmp_path)["html"]
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "@import" not in html and "url(" not in html
    assert "<link" not in html
    assert '<script src' not in html


def test_identical_record_gives_identical_bytes(record, tmp_path):
    a = render_reports(record, tmp_path / "a")
    b = render_reports(json.loads(json.dumps(record)), tmp_path / "b")
    for fmt in a:
        assert a[fmt].read_bytes() == b[fmt].read_bytes(), fmt
    # and in a fresh interpreter with another hash seed (set/dict-order or cache leaks)
    src = tmp_path / "record.json"
    src.write_text(json.dumps(record))
    code = ("import json, sys; from quantkit.report.render import render_reports; "
            "render_reports(json.load(open(sys.argv[1])), sys.argv[2])")
    env = dict(os.environ, PYTHONHASHSEED="12345", MPLBACKEND="TkAgg")
    r = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "c")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for fmt, p in a.items():
        assert (tmp_path / "c" / p.name).read_bytes() == p.read_bytes(), fmt


def _strip(record: dict) -> dict:
    record["calibration"] = {}
    record["search"] = {}
    for c in record["candidates"].values():
        c.pop("latency", None)
    return record


def test_missing_calibration_search_latency_render(record, tmp_path):
    out = _render(_strip(record), tmp_path)
    for fmt in ("md", "html"):
        assert "Calibration: not measured" in out[fmt]
        assert "Latency: not measured" in out[fmt]
        assert "Precision search: not run" in out[fmt]
        assert "Ranges files: not recorded" in out[fmt]
    assert 'id="plot-activations"' not in out["html"]
    assert len(IMG.findall(out["html"])) == 2


def test_bare_record_renders(tmp_path):
    bare = RunRecord(experiment="bare", run_dir=str(tmp_path), command="", config={}, seed=0).to_dict()
    out = _render(bare, tmp_path)
    for fmt in ("md", "html"):
        text = out[fmt]
        assert "None recommended" in text or "**none**" in text
        assert "Per-layer comparison: not measured" in text
        assert "Task metrics: not measured" in text
        assert "Command: not recorded" in text
    assert "<img" not in out["html"]


def test_candidates_without_layers_or_verdicts_render(record, tmp_path):
    for i, c in enumerate(record["candidates"].values()):
        for key in ("layers", "flagged_layers", "first_diverging", "backend_check", "slices",
                    "kernel_census", "plan_counts", "lint"):
            c.pop(key, None)
        if i % 2:
            c.pop("verdict", None)
    record["artifacts"] = {}
    record["recommended"] = "no-such-candidate"
    out = _render(record, tmp_path)
    assert "no-such-candidate" in out["md"]
    assert "Per-layer comparison: not measured" in out["html"]
    assert "Precision plan: not measured" in out["html"]


def test_latency_table_when_present(record, tmp_path):
    record["candidates"]["int8.minmax"]["latency"] = {
        "1": latency(1.234, p90_ms=1.5, throughput=800.0),
        "16": latency(9.75, batch=16, p90_ms=10.5, throughput=1641.0)}
    out = _render(record, tmp_path)
    for fmt in ("md", "html"):
        assert "Latency: not measured" not in out[fmt]
        assert "1.234" in out[fmt] and "9.750" in out[fmt] and "1641.0" in out[fmt]
    md = out["md"]
    assert md.index("| `int8.minmax` | 1 |") < md.index("| `int8.minmax` | 16 |")


def test_real_search_record(record_search, tmp_path):
    out = _render(record_search, tmp_path)
    search = record_search["search"]
    assert record_search["recommended"] == "mixed"
    assert 'id="plot-pareto"' in out["html"]
    assert len(IMG.findall(out["html"])) == 4
    for fmt in ("md", "html"):
        text = out[fmt]
        assert "Precision search: not run" not in text
        assert search["reason"] in text and search["calibrator"] in text
        assert "accuracy delta vs FP32" in text  # the search metric is named, not "metric"
        assert search["ranking"][0] in text
        assert "nodes moved off the default precision (0)" in text  # mixed: plan_reasons = {}
        assert record_search["candidates"]["mixed"]["artifact_sha256"] in text
    assert out["html"].count('<td class="num">48</td>') >= 1  # rank 48 of the full ranking
    ranking_md = out["md"].split("### Sensitivity ranking", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"^\| \d+ \| `/m/", ranking_md, re.M)) == 10  # md: top 10 of 48


def test_search_with_several_evaluations(record_search, tmp_path):
    ev0 = record_search["search"]["evaluations"][0]
    nodes = record_search["search"]["ranking"]
    evals = [ev0]
    for i, (k, status, point) in enumerate([(4, "INCONCLUSIVE", -0.004), (2, "PASS", 0.001),
                                            (1, "FAIL", -0.02)], 1):
        e = json.loads(json.dumps(ev0))
        e.update(index=i, phase="bisect", k=k, fp16_count=k, fp16_set=nodes[:k], status=status,
                 metric=point, interval=[point - 0.005, point + 0.005])
        e["extra"]["verdict"]["deltas"]["accuracy"]["point"] = point
        evals.append(e)
    record_search["search"].update(evaluations=evals, fp16_nodes=nodes[:2], pruned=[nodes[2]],
                                   pareto=[{"fp16_count": 0, "metric": ev0["metric"], "status": "PASS",
                                            "fp16_set": [], "k": 0, "index": 0}])
    record_search["candidates"]["mixed"]["fp16_layers"] = nodes[:2]
    record_search["candidates"]["mixed"]["plan_reasons"] = {n: f"kept FP16 by search: rank {i}"
                                                            for i, n in enumerate(nodes[:2], 1)}
    out = _render(record_search, tmp_path)
    for fmt in ("md", "html"):
        assert "Evaluations (4)" in out[fmt]
        assert "kept FP16 by search: rank 2" in out[fmt]
        assert "nodes moved off the default precision (2)" in out[fmt]
        assert "-0.0040" in out[fmt] and "bisect" in out[fmt]


def test_a_search_section_of_another_shape_is_refused_with_its_key(record, tmp_path):
    """The brief's shape ({evaluations: [{fp16_set, k, status, metric, interval}], pareto,
    found}) is not a layout quantkit writes: the strict schema names the first key that
    does not fit, and nothing is rendered (quantkit/record/serde.py)."""
    record["search"] = {
        "evaluations": [{"fp16_set": [], "k": 0, "status": "INCONCLUSIVE", "metric": 0.7577,
                         "interval": [-0.021, -0.003], "seconds": 3.2}],
        "pareto": [1, 2], "found": ["/m/encoder/layer.3/output/dense/MatMul"],
        "budget_exhausted": False, "something_new": {"a": 1}}
    with pytest.raises(RecordError, match=r"record\.search\.(found|something_new)"):
        _render(record, tmp_path)
    assert not (tmp_path / "report.md").exists()


def test_per_node_plan_reasons_render(record, tmp_path):
    node = "/m/encoder/layer.3/output/dense/MatMul"
    record["candidates"]["int8.minmax"].update(fp16_layers=[node],
                                               plan_reasons={node: "sensitive: kept FP16"})
    out = _render(record, tmp_path)
    assert "sensitive: kept FP16" in out["html"]
    assert "int8.minmax" in out["md"] and "sensitive: kept FP16" in out["md"]


def test_html_escapes_record_text(record, tmp_path):
    record["notes"] = ['<script>alert("x")</script> & <b>bold</b>']
    record["experiment"] = "exp<img src=x>"
    out = _render(record, tmp_path)
    assert "<script>alert" not in out["html"]
    assert "&lt;script&gt;alert" in out["html"]
    assert "exp&lt;img src=x&gt;" in out["html"]


def test_markdown_escapes_pipes(record, tmp_path):
    record["candidates"]["int8.minmax"]["numerics"] = "ORT | CPU"
    md = _render(record, tmp_path)["md"]
    assert "ORT \\| CPU" in md


def test_formats_subset_and_reviewer(record, tmp_path):
    record["config"]["report"]["reviewer"] = "Ada Lovelace"
    paths = render_reports(record, tmp_path, formats=("md",))
    assert list(paths) == ["md"] and [p.name for p in tmp_path.iterdir()] == ["report.md"]
    assert "Reviewer: Ada Lovelace" in paths["md"].read_text()


def test_unknown_format_is_a_config_error(record, tmp_path):
    with pytest.raises(ConfigError, match="pdf"):
        render_reports(record, tmp_path, formats=("md", "pdf"))
    assert not list(tmp_path.iterdir())


def test_rewrite_replaces_atomically(record, tmp_path):
    render_reports(record, tmp_path)
    record["notes"] = ["second run"]
    paths = render_reports(record, tmp_path)
    assert "second run" in paths["md"].read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.json", "report.md"]


def test_markdown_marks_dev_only_candidates_and_the_engine_check(record_signed):
    """report.md, like report.html: a dev-only candidate's verdict reads 'not signed off'
    in every table that shows it; the banner says the engine check has NOT run."""
    from quantkit.report.render import render_markdown

    md = render_markdown(record_signed)
    signed = set(record_signed["signoff"]["family"]["candidates"])
    for name, c in record_signed["candidates"].items():
        if not c.get("verdict"):
            continue
        lines = [ln for ln in md.splitlines() if ln.startswith(f"| `{name}`")
                 and c["verdict"]["status"] in ln]
        assert lines, name
        assert all(("not signed off" in ln) == (name not in signed) for ln in lines), name
    head = md.split("## Verdict per candidate")[0]
    assert "Engine check NOT run" in head and "backend=trt" in head
