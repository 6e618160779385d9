"""Is the sign-off valid? Drive the run's own sign-off path on simulated evaluations.

No model runs: each simulated experiment draws the FP32 reference's and the candidates'
outputs (logits or embeddings) on a dev and a test split, and everything that decides is the
run's code on a real ``RunContext`` (the tests' tiny world, composed in-process by
``tests/run/runworld.py: settings_for`` with the overrides below; its dev / test splits
replaced by synthetic ones, as ``tests/run/test_macro_f1_signoff.py`` does):

* dev: every candidate's paired test by ``quantkit.run.verdicts.candidate_test`` (the
  declared metric, the run's margin / floor / ceiling after the engine check's share,
  churn gate, min_n / min_groups, the run's seed); the family by
  ``quantkit.run.stages.signoff.family_members`` (fp16, the INT8 of three calibrators with the highest
  planned power on dev evidence, then its dev-metric tie rule, mixed);
* test: ``quantkit.run.stages.signoff.signoff`` itself: the persistent test ledger (a fresh
  SQLite file per simulated experiment, ``verdict.ledger``) reserves the look and its
  alpha, the family is declared and power-planned at that alpha, each member is tested once
  (``evaluate_member`` hands the simulated outputs to the same ``candidate_test`` at the
  look's alpha, instead of running an artifact), the familywise decision is written back;
* the recommendation: ``check_backend`` (here: engine check not run, target=tensorrt on
  ONNX Runtime), ``recommend_signed`` (``blocked_by_engine``, ``recommend_candidate``);
  the engine row runs the engine gate on simulated engine-vs-emulation outputs
  (``quantkit.run.stages.backend_check.gate_outputs``, target=ort_cpu with qdq_mode=exact: the
  check runs here and gates).

Settings: the run's defaults (``verdict.n_boot=2000``, alpha 0.05 two-sided = 0.025 one-sided,
relative margin 1%, ``compare.numerics_margin_share=0.5``, ``verdict.min_n`` /
``min_groups`` / ``max_flip_rate`` / ``score_quantile``) except ``verdict.min_power=0``
(``--min-power``): the power gate only removes looks, so 0 (every declared member tested)
is the worst case for validity and measures the test rule itself; ``verdict.power_sims=0``
(``--power-sims``): the analytic power plan, which with min_power 0 decides nothing.

Rows: every candidate's true loss sits exactly at the bound the run tests (the sign-off's
share of the declared budget), so any recommendation is a false PASS. FP32 accuracy 0.77;
candidates fp16 (flip rate 0.5%), three INT8 calibrators (5%), mixed (2%); n_dev 2,500 and
n_test 6,000 (bert_int8's sizes) unless the row says otherwise.

* ``accuracy``: the relative margin (0.5% of 0.77 after the engine share);
* ``macro_f1``: 3 classes 60/30/10, the loss only in the 10% class, 4% churn
  (``benchmarks/macro_f1_validity.py``'s "rare" world at the run's threshold);
* ``agreement``: top-1 agreement with FP32 exactly at the floor (0.995 after the share);
* ``cosine_n100`` / ``cosine_n500``: per-example cosine, 5% of examples below the
  per-example floor (0.9975 after the share), 1% of them catastrophic (cosine 0..0.5);
* ``kl_n100`` / ``kl_n500``: per-example KL lognormal (sigma 2) with exactly 5% above the
  per-example ceiling (0.0025 after the share);
* ``recall_n500``: recall@10 in a fixed gallery of 1,000 (``candidate_test`` with the
  gallery), 5% of queries losing their neighbours;
* ``grouped``: 6,000 test examples in groups of 25 (2,500 dev), the whole loss in 10% of
  the groups (each group bad with probability 0.1);
* ``few_bad_groups``: 80 groups in each split (75 examples a group on test, 31 on dev), the
  whole loss in 5% of the groups of the population (a split holds 4 on average, sometimes
  none): ``benchmarks/validity_groups.py``;
* ``reruns_k5``: the same test examples judged 5 times through one ledger (reruns with
  seeds 0..4, each a new set of candidates at the margin): a false PASS if ANY look
  recommends;
* ``retest``: n_test 3,000; a look with no PASS and an INCONCLUSIVE member is re-tested on
  the split grown to 6,000 (the first 3,000 examples and their outputs kept,
  ``verdict.supersedes``): a false PASS if either look recommends;
* the test ledger's rows (issue 49; ``benchmarks/validity_ledger.py``, whose docstring
  names the code that decides each): every simulated user keeps the looks in a default
  ledger of their own (``verdict.ledger`` unset, ``$XDG_DATA_HOME`` per user) and the model
  is identified at every look from its ONNX file by the run's fingerprint; a false PASS if
  ANY look recommends: ``seeds_new_cache_k10`` (seeds 0..9, each a new ``cache_dir``, the
  test split re-drawn from one pool), ``reexport`` (5 looks alternating the ONNX file and a
  re-export of it), ``whitespace`` (5 looks on the same texts respelled: trailing and
  doubled spaces, NFD, NFKC), ``fresh_data_no_supersedes`` (3,000 examples; while no
  recommendation, up to 5 looks on fresh non-overlapping examples, no
  ``verdict.supersedes``);
* ``engine``: candidates lossless against the emulation, the engine flipping exactly the
  declared margin's worth of top-1 predictions against it (0.0077) on the dev examples the
  run compares (``compared_size``): the share of runs in which a candidate is recommended
  (acceptance: not recommended in >= 95%);
* ``engine_macro_f1``, ``engine_share``, ``engine_recall``: the engine exactly at its
  tolerance in the decision metric's units (macro-F1 loss; the engine's part of
  ``score_quantile`` outside its KL tolerance; of queries losing their neighbours in the
  fixed gallery), a false PASS if recommended; ``engine_faithful``: a faithful engine's
  pass rate (>= 0.8), printed apart (benchmarks/validity_engine.py says how each is drawn).

Each row prints the rate, its Monte-Carlo SE and OK / EXCESS against 0.025 + 2 SE (SE =
sqrt(0.025 * 0.975 / sims); the engine row against 0.05); last line
``false_pass_recommended=<accuracy row> worst_row=<row>:<rate> power_lossless=<y>
n_test=<n>``, power_lossless being the share of runs with a recommendation when every
candidate is lossless (the accuracy world).

    python benchmarks/verdict_validity.py [--sims 2000] [--rows accuracy kl_n100 ...]
    python benchmarks/verdict_validity.py --sims 100      # a quick check
    python benchmarks/verdict_validity.py --smoke         # every row, 3 simulations each
    python benchmarks/verdict_validity.py --jobs 2        # rows in 2 worker processes

A simulated user whose look recommends stops looking (the outcome is a false PASS already).
The harness computes a split's sha256 once per split, its example ids once per list of
texts and the environment probe once per process (each by the run's own code).

The process points QUANTKIT_CACHE and HOME at a temporary directory before importing
quantkit (nothing of the user's cache or home is read or written).

The measured rows (rates, seconds, host, commit) are in
benchmarks/results/verdict_validity.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import logging
import multiprocessing
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import validity_engine  # noqa: E402
import validity_ledger  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.025
P_REF = 0.77
CALIBRATORS = ("int8.minmax", "int8.entropy", "int8.mse")
NAMES = ("fp16", *CALIBRATORS, "mixed")
FLIP = {"fp16": 0.005, "int8.minmax": 0.05, "int8.entropy": 0.05, "int8.mse": 0.05,
        "mixed": 0.02}
INT8_NODES = {"fp16": 0, "int8.minmax": 48, "int8.entropy": 48, "int8.mse": 48, "mixed": 44}
ROWS = ("accuracy", "macro_f1", "agreement", "cosine_n100", "cosine_n500", "kl_n100",
        "kl_n500", "recall_n500", "grouped", "reruns_k5", "retest", "engine",
        *validity_engine.ROWS, *validity_ledger.ROWS, "few_bad_groups")
#: each row's random stream (its index in ROWS when it was measured: the rows added
#: together in issue 49 were measured on separate branches, each from 12, and keep those
#: streams, so that a rerun reproduces benchmarks/results/verdict_validity.md)
STREAM = {**{r: i for i, r in enumerate(ROWS[:12])},
          **{r: 12 + i for i, r in enumerate(validity_engine.ROWS)},
          **{r: 12 + i for i, r in enumerate(validity_ledger.ROWS)}, "few_bad_groups": 12}


def isolate(tmp: Path) -> None:
    """The user's cache and home are never touched: both point into ``tmp``."""
    for key, sub in (("QUANTKIT_CACHE", "cache"), ("HOME", "home"),
                     ("XDG_CACHE_HOME", "xdg")):
        (tmp / sub).mkdir(parents=True, exist_ok=True)
        os.environ[key] = str(tmp / sub)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


# -- stand-ins for what a run builds and this benchmark does not: artifacts ---------------

@dataclass(frozen=True)
class SimPlan:
    int8: int

    def counts(self) -> dict[str, int]:
        return {"int8": self.int8}

    def int8_nodes(self) -> list[str]:
        return []


@dataclass(frozen=True)
class SimArtifact:
    """What sign_off / recommend_signed read of an Artifact: name, sha256, plan."""

    name: str
    sha256: str
    plan: SimPlan
    path: str = "simulated.onnx"
    emulated: Any = None


@functools.cache
def _text_split_class():
    """:class:`quantkit.data.splits.TextSplit` whose ``sha256`` is computed once per split
    object and whose ``example_ids`` once per list of texts, each by TextSplit's own code (a
    simulated split never changes; the sign-off asks for its sha256 five times per look, and
    reruns judge the same texts again)."""
    from quantkit.data.splits import TextSplit

    @functools.lru_cache(maxsize=16)
    def ids_of(texts: tuple[str, ...]) -> tuple[bytes, ...]:
        return tuple(TextSplit("ids", list(texts), None).example_ids())

    class SimTextSplit(TextSplit):
        @functools.cached_property
        def sha256(self) -> str:  # type: ignore[override]
            return TextSplit.sha256.fget(self)

        def example_ids(self) -> list[bytes]:
            return list(ids_of(tuple(self.texts)))

    return SimTextSplit


@functools.cache
def _context_class():
    """:class:`quantkit.run.context.RunContext` whose ``measured_key`` (CPU, ISA, numpy's BLAS
    through threadpoolctl, ORT version: 4 ms, asked twice per look) is probed once per
    process: it cannot change while the benchmark runs."""
    from quantkit.run.context import RunContext

    @dataclass(frozen=True)
    class SimContext(RunContext):
        environment: dict | None = None

        def measured_key(self) -> dict[str, Any]:
            return self.environment if self.environment is not None else super().measured_key()

    return SimContext


# -- one simulated split ------------------------------------------------------------------

@dataclass
class Draw:
    """One split's labels / groups, FP32's outputs and every candidate's outputs."""

    labels: np.ndarray
    ref: np.ndarray
    cands: dict[str, np.ndarray]
    groups: list[str] | None = None


def onehot(pred: np.ndarray, classes: int) -> np.ndarray:
    out = np.zeros((pred.size, classes), dtype=np.float32)
    out[np.arange(pred.size), pred] = 1.0
    return out


def _binary_correct(rng, ref_right: np.ndarray, flip: float, loss: float,
                    p_b_scale: np.ndarray | float = 1.0) -> np.ndarray:
    """Candidate correctness with flip rate ``flip`` and accuracy loss ``loss`` (absolute):
    P(FP32 right, candidate wrong) = (flip + loss) / 2, P(wrong -> right) = (flip - loss) / 2."""
    f = max(flip, loss + 0.002)
    p_b = (f + loss) / 2 * p_b_scale
    p_c = (f - loss) / 2
    u = rng.random(ref_right.size)
    return np.where(ref_right, u >= p_b / P_REF, u < p_c / (1 - P_REF))


def draw_accuracy(rng, n: int, loss: float, *, group_size: int = 0,
                  ref: tuple[np.ndarray, np.ndarray] | None = None) -> Draw:
    """Binary labels, FP32 right w.p. 0.77; ``loss`` (absolute accuracy) for every candidate.
    ``group_size`` > 0: the whole loss in 10% of the groups (group_validity's world).
    ``ref``: (labels, FP32 right) kept (the same examples judged again)."""
    y, right = ref if ref is not None else (rng.integers(0, 2, n), rng.random(n) < P_REF)
    groups = None
    cands = {}
    if group_size:
        g = np.arange(n) // group_size
        bad = rng.random(g[-1] + 1) < 0.1
        groups = [f"g{i}" for i in g.tolist()]
    for c in NAMES:
        if group_size:
            f = FLIP[c] if c != "fp16" else 0.01
            p_b = f / 2 + (loss / 0.1) * bad[g]
            u = rng.random(n)
            ok = np.where(right, u >= p_b / P_REF, u < (f / 2) / (1 - P_REF))
        else:
            ok = _binary_correct(rng, right, FLIP[c], loss)
        cands[c] = onehot(np.where(ok, y, 1 - y), 2)
    return Draw(y, onehot(np.where(right, y, 1 - y), 2), cands, groups)


def draw_agreement(rng, n: int, disagree: float) -> Draw:
    y = rng.integers(0, 2, n)
    r = np.where(rng.random(n) < P_REF, y, 1 - y)
    cands = {c: onehot(np.where(rng.random(n) < disagree, 1 - r, r), 2) for c in NAMES}
    return Draw(y, onehot(r, 2), cands)


class MacroWorld:
    """benchmarks/macro_f1_validity.py's "rare" world (3 classes 60/30/10, FP32 85% right,
    4% churn, the loss only in class 2) with its population loss found at ``margin``."""

    def __init__(self, margin_rel: float) -> None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from macro_f1_validity import World

        self.world = World("rare", (0.6, 0.3, 0.1), 0.85, 0.04, 2)
        lo, hi = -1.0, 1.0
        for _ in range(80):
            mid = (lo + hi) / 2
            ref, cand = self.world.population(mid)
            lo, hi = (mid, hi) if cand - ref > -margin_rel * ref else (lo, mid)
        self.null_loss = (lo + hi) / 2

    def draw(self, rng, n: int, loss: float) -> Draw:
        p = self.world.cells(loss)
        c = p.shape[0]
        yr = p.sum(axis=2)
        idx = rng.choice(c * c, size=n, p=yr.ravel() / yr.sum())
        y, r = idx // c, idx % c
        cond = p / np.maximum(yr[..., None], 1e-300)  # P(q | y, r)
        cum = np.cumsum(cond[y, r], axis=1)
        cands = {}
        for name in NAMES:
            u = rng.random(n)[:, None]
            q = np.minimum((u > cum).sum(axis=1), c - 1)
            cands[name] = onehot(q, c)
        return Draw(y, onehot(r, c), cands)


def _unit(rng, n: int, d: int) -> np.ndarray:
    v = rng.normal(size=(n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def draw_cosine(rng, n: int, floor: float, outside: float = 0.05,
                catastrophic: float = 0.01, dim: int = 16) -> Draw:
    """Per-example cosine to FP32: P(below ``floor``) = ``outside``, ``catastrophic`` of the
    examples far below (0..0.5), the rest just below; inside: skewed towards 1."""
    ref = _unit(rng, n, dim)
    cands = {}
    for c in NAMES:
        u = rng.random(n)
        gap = 1.0 - floor
        cos = np.where(u < catastrophic, rng.uniform(0.0, 0.5, n),
                       np.where(u < outside, 1.0 - gap * rng.uniform(1.05, 4.0, n),
                                1.0 - gap * rng.beta(0.5, 3.0, n) * 0.95))
        o = _unit(rng, n, dim)
        o -= np.sum(o * ref, axis=1, keepdims=True) * ref
        o /= np.linalg.norm(o, axis=1, keepdims=True)
        cands[c] = cos[:, None] * ref + np.sqrt(1.0 - cos ** 2)[:, None] * o
    return Draw(np.zeros(n, np.int64), ref, cands)


def _kl2(z: np.ndarray, d: np.ndarray) -> np.ndarray:
    """KL(softmax([0, z]) || softmax([0, z + d]))."""
    p1, q1 = 1 / (1 + np.exp(-z)), 1 / (1 + np.exp(-(z + d)))
    with np.errstate(divide="ignore"):  # q1 == 1 in float: KL inf, above every target
        return p1 * np.log(p1 / q1) + (1 - p1) * np.log((1 - p1) / (1 - q1))


def kl_shift(z: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The logit shift d, away from the decision boundary (no flips), with
    KL(softmax([0, z]) || softmax([0, z + d])) = ``target`` per example."""
    sign = np.where(z >= 0, 1.0, -1.0)
    lo, hi = np.zeros(z.size), np.full(z.size, 60.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        big = _kl2(z, sign * mid) > target
        hi, lo = np.where(big, mid, hi), np.where(big, lo, mid)
    return sign * (lo + hi) / 2


def draw_kl(rng, n: int, ceiling: float, sigma: float = 2.0, outside: float = 0.05) -> Draw:
    """Per-example KL lognormal(mu, sigma) with P(KL > ``ceiling``) = ``outside``."""
    from scipy.stats import norm

    mu = math.log(ceiling) - sigma * float(norm.ppf(1 - outside))
    y = rng.integers(0, 2, n)
    z = np.where(y == 1, 1.0, -1.0) * rng.normal(2.0, 1.0, n)
    ref = np.stack([np.zeros(n), z], axis=1)
    cands = {}
    for c in NAMES:
        target = np.minimum(rng.lognormal(mu, sigma, n), 5.0)
        cands[c] = np.stack([np.zeros(n), z + kl_shift(z, target)], axis=1)
    return Draw(y, ref, cands)


def draw_recall(rng, n: int, outside: float, gallery: np.ndarray) -> Draw:
    """Queries whose candidate embedding is FP32's (recall 1) or, w.p. ``outside``, its
    opposite (its 10 nearest gallery items are FP32's 10 farthest: recall 0)."""
    ref = _unit(rng, n, gallery.shape[1])
    cands = {c: np.where((rng.random(n) < outside)[:, None], -ref, ref) for c in NAMES}
    return Draw(np.zeros(n, np.int64), ref, cands)


# -- the run's path on one simulated experiment -------------------------------------------

class Bench:
    """The tiny world's prepared RunContext and the run's sign-off path on simulated outputs."""

    def __init__(self, tmp: Path, *, min_power: float = 0.0, power_sims: int = 0) -> None:
        sys.path.insert(0, str(ROOT / "tests" / "run"))
        sys.path.insert(0, str(ROOT / "tests" / "reliability"))
        import tinyworld

        from quantkit.app import prepared_context

        self.tmp = tmp
        self.min_power, self.power_sims = min_power, power_sims
        self.tiny = tinyworld.make_world(tmp / "tiny")
        self.base = ("stage_cache=false", "verdict.n_boot=2000",
                     f"verdict.min_power={min_power:g}", f"verdict.power_sims={power_sims}")
        ctx0 = prepared_context(self.settings(), tmp / "run")
        sim = _context_class()
        self.ctx0 = sim(**{f.name: getattr(ctx0, f.name) for f in dataclasses.fields(ctx0)},
                        environment=ctx0.measured_key())
        self._settings: dict[tuple, Any] = {}
        self._texts: list[str] = []
        self._reexport = None
        self.experiments = 0
        self.users = 0
        self.notes: dict[str, str] = {}  # row -> a line on how its looks were charged

    def settings(self, *extra: str):
        from runworld import settings_for

        return settings_for(self.tiny, *self.base, *extra)

    def row_settings(self, *extra: str):
        if extra not in self._settings:
            self._settings[extra] = self.settings(*extra)
        return self._settings[extra]

    def texts(self, n: int, start: int = 0) -> list[str]:
        while len(self._texts) < start + n:
            self._texts.append(f"example {len(self._texts)}")
        return self._texts[start:start + n]

    def ledger(self) -> Path:
        """A fresh ledger file for the next simulated experiment; the previous one's files
        (the database, its WAL and shared memory) are removed first, so the temporary
        folder stays a few MB however many experiments run (it is in /dev/shm: keeping
        every ledger filled the machine's memory at 2,000 runs per row)."""
        if self.experiments:
            old = self.tmp / "ledgers" / f"{self.experiments}.sqlite"
            for f in old.parent.glob(old.name + "*"):
                f.unlink(missing_ok=True)
        self.experiments += 1
        return self.tmp / "ledgers" / f"{self.experiments}.sqlite"

    def new_user(self) -> Path:
        """A new simulated user: ``$XDG_DATA_HOME`` points at a fresh folder, so a run that
        names no ledger (``ledger=None`` in :meth:`context`) keeps its looks in this user's
        default ledger, ``<folder>/quantkit/ledger.sqlite`` (quantkit/ledger_location.py);
        the previous user's folder is removed (as :meth:`ledger` does)."""
        if self.users:
            shutil.rmtree(self.tmp / "users" / str(self.users), ignore_errors=True)
        self.users += 1
        home = self.tmp / "users" / str(self.users)
        home.mkdir(parents=True)
        os.environ["XDG_DATA_HOME"] = str(home)
        return home

    def reexported(self):
        """The tiny world's model re-exported to another ONNX file (another producer, doc
        string, node and initializer names and order; the same weights and function:
        :func:`validity_ledger.reexport`), as a :class:`quantkit.models.model.Model`."""
        if self._reexport is None:
            import hashlib

            path = validity_ledger.reexport(Path(self.ctx0.model.path),
                                            self.tmp / "tiny" / "tiny_reexported.onnx")
            sha = hashlib.sha256(path.read_bytes()).hexdigest()
            self._reexport = dataclasses.replace(self.ctx0.model, path=str(path), sha256=sha)
        return self._reexport

    def context(self, settings, dev: Draw, test: Draw, *, ledger: Path | None, seed: int = 0,
                classes: int = 2, embedding: bool = False, supersedes: str | None = None,
                texts: list[str] | None = None, model=None, cache_dir: Path | None = None,
                fingerprint: bool = False):
        """The prepared context with synthetic dev / test splits (``test_macro_f1_signoff``'s
        ``_ctx_with_test_split``), this experiment's ledger file and seed.

        ``ledger`` None: ``verdict.ledger`` unset, the run's default ledger (the user data
        dir: :meth:`new_user`); ``texts``: the test split's texts (default ``texts(n)``);
        ``model``: another ONNX file of the model (:meth:`reexported`), ``model.path`` set to
        it; ``cache_dir``: the run's ``cache_dir``; ``fingerprint``: no precomputed identity,
        so ``sign_off`` identifies the model itself from its ONNX file
        (``quantkit.run.model_identity``: the fingerprint, recomputed as in a new cache)."""
        from quantkit.data.info import DataInfo

        v = dataclasses.replace(settings.verdict, ledger=None if ledger is None else str(ledger),
                                ledger_path=None if ledger is None else settings.verdict.ledger_path,
                                supersedes=supersedes)
        changes: dict[str, Any] = {"verdict": v, "seed": seed}
        if cache_dir is not None:
            changes["cache_dir"] = str(cache_dir)
        if model is not None:
            changes["model"] = dataclasses.replace(settings.model, path=model.path)
        s = dataclasses.replace(settings, **changes)
        grouped = test.groups is not None
        split_class = _text_split_class()

        def split(name: str, d: Draw, start: int, given: list[str] | None = None):
            texts = given if given is not None else self.texts(len(d.labels), start)
            groups = [f"{name}-{g}" for g in d.groups] if grouped else []
            return split_class(name, texts, d.labels, groups)

        info = DataInfo(group_column="group" if grouped else None)
        splits = dataclasses.replace(
            self.ctx0.splits, dev=split("dev", dev, 10_000_000),
            test=split("test", test, 0, texts), label_names=[f"c{i}" for i in range(classes)],
            info=info)
        model = dataclasses.replace(model or self.ctx0.model,
                                    output_kind="embedding" if embedding else "logits")
        extra: dict[str, Any] = {}
        if cache_dir is not None:
            extra["cache_dir"] = Path(cache_dir)
        if fingerprint:
            extra["identity"] = None
        return dataclasses.replace(self.ctx0, settings=s, splits=splits, model=model,
                                   lengths=None, policy=None, **extra)  # policy: seed's


def _evaluation(ctx, split: str, name: str, ref: np.ndarray, out: np.ndarray | None, *,
                alpha: float | None = None, gallery: np.ndarray | None = None):
    """An Evaluation of simulated outputs: the run's candidate_test against FP32 on ``split``
    and the metrics decision_value reads."""
    from quantkit.run.evaluation import Evaluation
    from quantkit.run.verdicts import candidate_test

    if out is None:  # the FP32 reference itself: the run's task metrics
        from quantkit.compare.task import task_metrics

        y = ctx.split(split).labels
        m = task_metrics(y, ref.argmax(axis=1), labels=list(range(ref.shape[1])))
        metrics = {"accuracy": float(m["accuracy"]), "macro_f1": float(m["macro_f1"])}
        return Evaluation.of("fp32", {"metrics": metrics}, ref, split=split, gallery=gallery)
    t = candidate_test(ctx, split, ref, out, name=name, alpha=alpha, ref_gallery=gallery,
                       gallery=gallery, gallery_info=None)
    metrics = {t.metric: float(t.cand_value) if t.metric in ("accuracy", "macro_f1")
               else float(t.point)}
    return Evaluation.of(name, {"metrics": metrics}, out, split=split, test=t, gallery=gallery)


@dataclass
class Outcome:
    recommended: str | None
    inconclusive: bool
    look_id: str | None
    statuses: dict
    facts: dict = dataclasses.field(default_factory=dict)  # record.signoff.ledger


def experiment(ctx, dev: Draw, test: Draw, *, shas: dict[str, str],
               gallery: np.ndarray | None = None,
               engine: Callable[[Any, Any], dict] | None = None) -> Outcome:
    """One run's choices on dev and its sign-off on test, through the run's functions."""
    from quantkit.run.stages.backend_check import BackendCheck, backend_check as check_backend
    from quantkit.run.stages.signoff import family_members, signoff as sign_off
    from quantkit.run.stages.recommend import recommend as recommend_signed

    ref_dev = _evaluation(ctx, "dev", "fp32", dev.ref, None, gallery=gallery)
    dev_evals = {c: _evaluation(ctx, "dev", c, dev.ref, dev.cands[c], gallery=gallery)
                 for c in NAMES}
    members = family_members(ctx, {c: dev_evals[c] for c in ("fp16", *CALIBRATORS)},
                             dev_evals["mixed"])  # a search that kept 4 layers: declared
    artifacts = {m: SimArtifact(m, shas[m], SimPlan(INT8_NODES[m])) for m in members}
    ref_test = _evaluation(ctx, "test", "fp32", test.ref, None, gallery=gallery)

    def evaluate_member(c, name, art, reference, look):
        return _evaluation(c, "test", name, reference.logits, test.cands[name],
                           alpha=look.alpha, gallery=gallery)

    so = sign_off(ctx, members, artifacts, dev_evals, ref_test, evaluate_member=evaluate_member)
    if engine is None:
        checks = {m: check_backend(ctx, artifacts[m], ref_dev, family_size=len(members))
                  for m in members}
    else:  # each member's gate at alpha over the family's size, as the run does
        checks = {m: BackendCheck.of(engine(ctx, ref_dev, len(members))) for m in members}
    rec, _ = recommend_signed(ctx, so, artifacts, checks, None)
    statuses = {} if so.decision is None else {m: so.decision.status(m)
                                                for m in so.family.candidates}
    return Outcome(rec.candidate, "INCONCLUSIVE" in statuses.values(), so.look.get("look_id"),
                   statuses, dict(so.look))


def _shas(rng) -> dict[str, str]:
    return {c: f"{int(x):016x}" * 4 for c, x in zip(NAMES, rng.integers(0, 2**63, len(NAMES)))}


# -- rows -----------------------------------------------------------------------------------

N_DEV, N_TEST = 2500, 6000


def run_row(bench: Bench, row: str, sims: int, seed: int, *, loss_factor: float = 1.0
            ) -> float:
    """The share of ``sims`` simulated experiments in which a candidate is recommended.

    ``loss_factor``: the true loss in units of the bound the run tests (1: at the bound, a
    recommendation is a false PASS; 0: lossless, the power; 3: far beyond)."""
    from quantkit.run.deployment import declared_budget, quantile_split
    from quantkit.run.verdicts import signoff_threshold

    f = float(loss_factor)
    stream = {1.0: 0, 0.0: 1}.get(f, 2 + int(round(f * 1000)))
    rng = np.random.default_rng([seed, STREAM[row], stream])
    hits = 0
    if row in validity_engine.ROWS:
        return validity_engine.ROWS[row](bench, sims, rng, f)
    if row in validity_ledger.ROWS:
        return validity_ledger.ROW_FUNCTIONS[row](bench, sims, rng, f)
    if row == "few_bad_groups":  # its world lives in validity_groups (which imports this)
        from validity_groups import few_bad_groups
        return few_bad_groups(bench, sims, rng, f)
    if row in ("accuracy", "grouped", "reruns_k5", "retest"):
        s = bench.row_settings()
        loss = f * signoff_threshold(s, "accuracy") * P_REF
        gsize = 25 if row == "grouped" else 0
        n_test = 3000 if row == "retest" else N_TEST
        for _ in range(sims):
            dev = draw_accuracy(rng, N_DEV, loss, group_size=gsize)
            test = draw_accuracy(rng, n_test, loss, group_size=gsize)
            ledger = bench.ledger()
            if row == "reruns_k5":
                fixed = (test.labels, test.ref.argmax(axis=1) == test.labels)
                for k in range(5):  # a new seed: new candidates, the same test examples
                    if k:
                        dev = draw_accuracy(rng, N_DEV, loss)
                        test = draw_accuracy(rng, n_test, loss, ref=fixed)
                    ctx = bench.context(s, dev, test, ledger=ledger, seed=k)
                    if experiment(ctx, dev, test, shas=_shas(rng)).recommended is not None:
                        hits += 1  # a false PASS already: this user's later looks change nothing
                        break
                continue
            ctx = bench.context(s, dev, test, ledger=ledger)
            shas = _shas(rng)
            out = experiment(ctx, dev, test, shas=shas)
            hit = out.recommended is not None
            if row == "retest" and not hit and out.inconclusive and out.look_id:
                more = draw_accuracy(rng, n_test, loss)
                grown = Draw(np.concatenate([test.labels, more.labels]),
                             np.concatenate([test.ref, more.ref]),
                             {c: np.concatenate([test.cands[c], more.cands[c]])
                              for c in NAMES})
                ctx2 = bench.context(s, dev, grown, ledger=ledger, supersedes=out.look_id)
                hit = experiment(ctx2, dev, grown, shas=shas).recommended is not None
            hits += hit
        return hits / sims
    if row == "macro_f1":
        s = bench.row_settings("verdict.metric=macro_f1")
        world = MacroWorld(signoff_threshold(s, "macro_f1"))
        loss = f * world.null_loss
        for _ in range(sims):
            dev, test = world.draw(rng, N_DEV, loss), world.draw(rng, N_TEST, loss)
            ctx = bench.context(s, dev, test, ledger=bench.ledger(), classes=3)
            hits += experiment(ctx, dev, test, shas=_shas(rng)).recommended is not None
        return hits / sims
    if row == "agreement":
        s = bench.row_settings("verdict.metric=agreement")
        dis = f * (1.0 - signoff_threshold(s, "agreement"))
        for _ in range(sims):
            dev, test = draw_agreement(rng, N_DEV, dis), draw_agreement(rng, N_TEST, dis)
            ctx = bench.context(s, dev, test, ledger=bench.ledger())
            hits += experiment(ctx, dev, test, shas=_shas(rng)).recommended is not None
        return hits / sims
    if row.startswith(("cosine", "kl", "recall")):
        metric = {"cosine": "cosine", "kl": "kl", "recall": "recall_at_k"}[row.split("_")[0]]
        n = int(row.rsplit("_n", 1)[1])
        s = bench.row_settings(f"verdict.metric={metric}")
        bound = signoff_threshold(s, metric)
        outside = f * quantile_split(s, metric)[0]  # the sign-off's part of score_quantile
        gallery = _unit(np.random.default_rng(7), s.verdict.gallery_size, 16) \
            if metric == "recall_at_k" else None
        for _ in range(sims):
            if metric == "cosine":
                dev, test = (draw_cosine(rng, n, bound, outside, min(0.01, outside))
                             for _ in range(2))
            elif metric == "kl":
                dev, test = (draw_kl(rng, n, bound, 2.0, max(outside, 1e-4))
                             for _ in range(2))
            else:
                dev, test = (draw_recall(rng, n, outside, gallery) for _ in range(2))
            ctx = bench.context(s, dev, test, ledger=bench.ledger(),
                                embedding=metric != "kl")
            hits += experiment(ctx, dev, test, shas=_shas(rng),
                               gallery=gallery).recommended is not None
        return hits / sims
    if row == "engine":
        s = bench.row_settings("target=ort_cpu", "backend.qdq_mode=exact",
                               "precision.remainder=fp32")
        flip = f * declared_budget(s, "accuracy") * P_REF

        def deploy(emulated, labels):  # the lossless candidate's signed outputs, flipped
            pred = emulated.argmax(axis=1)
            return onehot(np.where(rng.random(pred.size) < flip, 1 - pred, pred), 2)

        passes: list[bool] = []
        for _ in range(sims):
            dev, test = draw_accuracy(rng, N_DEV, 0.0), draw_accuracy(rng, N_TEST, 0.0)
            ctx = bench.context(s, dev, test, ledger=bench.ledger())
            hits += experiment(ctx, dev, test, shas=_shas(rng),
                               engine=validity_engine.checker(deploy, passes)
                               ).recommended is not None
        validity_engine.note(bench, row, passes)
        return hits / sims
    raise ValueError(f"unknown row {row!r}; rows: {', '.join(ROWS)}")


def bound_for(row: str, sims: int) -> float:
    if row == "engine":
        return 0.05
    return ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / sims)


#: rows that cost several times the others (recall@k's gallery search, the cluster bootstrap)
SLOW_ROWS = ("recall_n500", "grouped", "few_bad_groups")
#: a faithful engine's pass rate must be at least this (not a false-PASS row)
MIN_PASS_RATE = 0.8


#: relative cost of a row (looks per simulated experiment, test size): the order in which
#: ``--jobs`` hands rows to its workers (the longest first)
ROW_COST = {"reruns_k5": 5, "recall_n500": 4, "grouped": 3, "few_bad_groups": 3, "retest": 1.5,
            "engine_recall": 3,
            **validity_ledger.ROW_COST}


def _timed_row(bench: Bench, row: str, sims: int, seed: int, loss_factor: float
               ) -> tuple[float, float, str | None]:
    t0 = time.perf_counter()
    rate = run_row(bench, row, sims, seed, loss_factor=loss_factor)
    return rate, time.perf_counter() - t0, bench.notes.pop(row, None)


_WORKER: dict[str, Bench] = {}


def _worker_start(root: str, min_power: float, power_sims: int) -> None:
    """A ``--jobs`` worker: its own temporary folder (isolated cache, home, ledgers, users)
    and its own Bench."""
    tmp = Path(root) / f"worker-{os.getpid()}"
    isolate(tmp)
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("quantkit").setLevel(logging.ERROR)
    _WORKER["bench"] = Bench(tmp, min_power=min_power, power_sims=power_sims)


def _worker_row(row: str, sims: int, seed: int, loss_factor: float):
    return _timed_row(_WORKER["bench"], row, sims, seed, loss_factor)


def run(bench: Bench, rows, sims: int, seed: int, *, slow_sims: int | None = None,
        out=print, jobs: int = 1) -> dict:
    """Every row's false-PASS rate (one line each, and a line on how a ledger row's looks
    were charged or how often an engine gate passed), the pass-rate rows apart, the lossless
    power, the summary line. ``jobs`` > 1: the rows (and the
    power) run in that many worker processes, each with its own Bench; a row's numbers are
    the same as in one process (each row has its own random stream)."""
    results, used, seconds, passing = {}, {}, {}, {}
    tasks = [(row, slow_sims if slow_sims and row in SLOW_ROWS else sims, 1.0) for row in rows]
    tasks.append(("accuracy", sims, 0.0))  # the power: every candidate lossless

    def report(task, rate: float, secs: float, note: str | None) -> None:
        row, n, f = task
        if f == 0.0:
            results["power"] = rate
            return
        used[row], seconds[row] = n, secs
        if row in validity_engine.PASS_RATE_ROWS:  # a pass rate: apart, not in worst_row
            passing[row] = rate
            se = math.sqrt(max(rate * (1 - rate), 1e-12) / n)
            out(f"{row:>12} sims={n} pass_rate={rate:.4f} SE={se:.4f} "
                f"min={MIN_PASS_RATE:g} {'OK' if rate >= MIN_PASS_RATE else 'LOW'} "
                f"({secs:.0f} s)")
            return
        se = math.sqrt(ALPHA * (1 - ALPHA) / n)
        ok = rate <= bound_for(row, n)
        results[row] = rate
        out(f"{row:>12} sims={n} false_pass={rate:.4f} SE={se:.4f} "
            f"bound={bound_for(row, n):.4f} {'OK' if ok else 'EXCESS'} ({secs:.0f} s)")
        if note:
            out(f"{'':>12} {note}")

    if jobs <= 1:
        for task in tasks:
            report(task, *_timed_row(bench, task[0], task[1], seed, task[2]))
    else:
        order = sorted(tasks, key=lambda t: -ROW_COST.get(t[0], 1) * t[1])
        root = bench.tmp / "workers"
        with concurrent.futures.ProcessPoolExecutor(
                jobs, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_start,
                initargs=(str(root), bench.min_power, bench.power_sims)) as pool:
            futures = {pool.submit(_worker_row, t[0], t[1], seed, t[2]): t for t in order}
            for fut in concurrent.futures.as_completed(futures):
                report(futures[fut], *fut.result())
    power = results.pop("power")
    worst = max(results, key=results.get) if results else None  # pass-rate rows only: none
    out(f"false_pass_recommended={results.get('accuracy', float('nan')):.4f} "
        f"worst_row={worst}:{results.get(worst, float('nan')):.4f} power_lossless={power:.4f} "
        f"n_test={N_TEST}")
    return {"rows": results, "sims": used, "power_lossless": power, "worst": worst,
            "seconds": seconds, "pass_rates": passing}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000, help="simulated experiments per row")
    ap.add_argument("--slow-sims", type=int, default=None,
                    help=f"simulations of the slow rows ({', '.join(SLOW_ROWS)}); default --sims")
    ap.add_argument("--rows", nargs="*", default=list(ROWS), choices=ROWS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-power", type=float, default=0.0,
                    help="verdict.min_power (0: every declared member tested, the worst case)")
    ap.add_argument("--power-sims", type=int, default=0, help="verdict.power_sims")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes (rows run in parallel; each its own temp folder)")
    _common.bench_args(ap, "every row, 3 simulated experiments each")
    args = ap.parse_args(argv)
    if args.smoke:
        args.sims, args.slow_sims = 3, 3
    t0 = time.perf_counter()
    logging.basicConfig(level=logging.ERROR)  # the run's per-candidate warnings: thousands
    logging.getLogger("quantkit").setLevel(logging.ERROR)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # the ledgers: no fsync
    with tempfile.TemporaryDirectory(prefix="verdict-validity-", dir=shm) as tmp:
        isolate(Path(tmp))
        sys.path.insert(0, str(ROOT))
        bench = Bench(Path(tmp), min_power=args.min_power, power_sims=args.power_sims)
        print(f"the run's sign-off path on simulated evaluations, one-sided alpha {ALPHA}, "
              f"{args.sims} simulated experiments per row; bound 0.025 + 2 SE (engine: "
              f"recommended <= 0.05); verdict.min_power={args.min_power:g}", flush=True)
        res = run(bench, args.rows, args.sims, args.seed, slow_sims=args.slow_sims,
                  out=lambda line: print(line, flush=True), jobs=args.jobs)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    bad = [r for r, v in res["rows"].items() if v > bound_for(r, res["sims"][r])]
    if not args.smoke:  # 3 simulations say nothing about a power
        bad += [r for r, v in res["pass_rates"].items() if v < MIN_PASS_RATE]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("verdict_validity", main))
