"""The test ledger's rows of benchmarks/verdict_validity.py (issue 49): the holes a user
causes by running again, each run the way a user would run it, through the run's own path.

Every row simulates users; each user has a default ledger of their own
(``verdict.ledger`` unset; ``$XDG_DATA_HOME`` points at a fresh folder per user:
``Bench.new_user``) and judges one model again and again. Every look goes through the
run's code that decides how it is charged:

* where the ledger is: ``quantkit.ledger_location.ledger_location`` (the default: the user
  data dir, whatever ``cache_dir`` says), opened by the run's preflight
  (``quantkit.run.stages.preflight.check_ledger``, with ``adopt_legacy`` of the run's
  ``cache_dir``);
* which model: no precomputed identity (``Bench.context(fingerprint=True)``), so
  ``sign_off`` calls ``quantkit.run.model_identity.model_identity`` on the ONNX file
  ``ctx.model.path`` (``quantkit.models.fingerprint``: weights digest and FP32 outputs on a
  fixed probe), and the store files it under the first registered fingerprint that
  matches (``quantkit.ledger_store.known_model``). The simulated artifacts' sha256 enter
  the decision key only (a rerun with new candidates is a new look), never the model;
* which examples: ``TextSplit.example_ids`` (``quantkit.data.identity.text_id``: NFC,
  whitespace collapsed) of the test split's texts;
* which lineage and alpha: ``quantkit.ledger_store.LedgerStore.reserve`` with the rules of
  ``quantkit.verdict.ledger`` (``join_lineages``, ``charged_lineage``, ``look_alpha``).

Every candidate's true loss sits at the bound (as in the ``reruns_k5`` row), so a
recommendation at any look is a false PASS; a user whose look recommends stops (the outcome
is decided). Rows:

* ``seeds_new_cache_k10``: seeds 0..9, each run with a new ``cache_dir``; a new seed
  re-draws the 6,000 test examples from the same pool of 7,500 (every pair of looks
  overlaps) and makes new candidates;
* ``reexport``: 5 looks on the same 6,000 test examples, alternating the tiny world's ONNX
  file and a re-export of it (:func:`reexport`: other file bytes, the same weights and
  outputs);
* ``whitespace``: 5 looks on the same 6,000 examples whose texts differ between looks:
  a trailing space and doubled inner spaces, NFD, NFKC (in half of the texts a ligature
  that NFKC expands: by the rule those are other texts, the other half overlaps), NFD with
  a trailing no-break space;
* ``fresh_data_no_supersedes``: n_test 3,000; while a look does not recommend, test again on
  3,000 fresh examples sharing none with the earlier ones, without ``verdict.supersedes``,
  up to 5 looks.

Each row leaves a line in ``Bench.notes``: how its looks were charged (``joined_by``).
"""

from __future__ import annotations

import sys
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

ROWS = ("seeds_new_cache_k10", "reexport", "whitespace", "fresh_data_no_supersedes")
#: relative cost (looks per simulated user): the order in which ``--jobs`` starts rows
ROW_COST = {"seeds_new_cache_k10": 10, "reexport": 5, "whitespace": 5,
            "fresh_data_no_supersedes": 2.5}
K_SEEDS, N_POOL = 10, 7500
K_REEXPORT = 5
K_WHITESPACE = 5
N_FRESH, K_FRESH = 3000, 5


def reexport(src: Path, dst: Path) -> Path:
    """``src`` saved again as another exporter would: another producer, version and doc
    string, graph name, every node and initializer renamed, internal tensors renamed, the
    initializers in reverse order. The same weights and function; other file bytes."""
    m = onnx.load(str(src))
    m.producer_name, m.producer_version = "pytorch", "2.3.0"
    m.doc_string = "re-exported by torch.onnx.export"
    g = m.graph
    g.name, g.doc_string = "main_graph", "the same network, exported again"
    outer = {v.name for v in (*g.input, *g.output)}
    rename = {t.name: f"onnx::Const_{i}" for i, t in enumerate(g.initializer)}
    for i, node in enumerate(g.node):
        for o in node.output:
            if o not in outer:
                rename[o] = f"/model/{node.op_type}_{i}_output_{len(rename)}"
    for t in g.initializer:
        t.name = rename[t.name]
    for v in g.value_info:
        v.name = rename.get(v.name, v.name)
    for i, node in enumerate(g.node):
        node.name = f"/model/{node.op_type}_{i}"
        node.input[:] = [rename.get(x, x) for x in node.input]
        node.output[:] = [rename.get(x, x) for x in node.output]
    inits = list(g.initializer)[::-1]
    del g.initializer[:]
    g.initializer.extend(inits)
    onnx.checker.check_model(m)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(dst))
    if dst.read_bytes() == src.read_bytes():
        raise AssertionError("the re-export must differ from the original file")
    return dst


def text_variant(text: str, k: int) -> str:
    """Look ``k``'s spelling of ``text`` (module docstring, ``whitespace``)."""
    if k == 0:
        return text
    if k == 1:
        return text.replace(" ", "  ") + " "
    if k == 2:
        return unicodedata.normalize("NFD", text)
    if k == 3:
        return unicodedata.normalize("NFKC", text)
    return unicodedata.normalize("NFD", text) + "\u00a0"


def accented_texts(n: int) -> list[str]:
    """``n`` test texts in NFC with composed accents; the even ones hold the ligature U+FB01
    (NFKC writes it as "fi")."""
    return [f"Caf\u00e9 cr\u00e8me n\u00b0{i}: "
            + ("\ufb01ne na\u00efve review" if i % 2 == 0 else "fine na\u00efve review")
            for i in range(n)]


def _harness(bench):
    """benchmarks/verdict_validity.py as the Bench came from (``__main__`` when run as a
    script): its draws and its ``experiment``, without a second copy of the module."""
    return sys.modules[type(bench).__module__]


class _User:
    """One simulated user's looks through the run's path (module docstring)."""

    def __init__(self, vv, bench, settings, rng, tally: Counter) -> None:
        self.vv, self.bench, self.s, self.rng, self.tally = vv, bench, settings, rng, tally
        self.home = bench.new_user()

    def look(self, dev, test, *, seed: int = 0, texts: list[str] | None = None, model=None,
             cache_dir: Path | None = None) -> bool:
        """One run's sign-off; True when it recommends a candidate (a false PASS)."""
        from quantkit.run.stages.preflight import check_ledger

        ctx = self.bench.context(self.s, dev, test, ledger=None, seed=seed, texts=texts,
                                 model=model, cache_dir=cache_dir, fingerprint=True)
        check_ledger(ctx)  # the run's preflight: the ledger it will use, opened
        out = self.vv.experiment(ctx, dev, test, shas=self.vv._shas(self.rng))
        facts = out.facts
        if facts.get("location") != "default" or \
                not Path(facts["path"]).is_relative_to(self.home):
            raise AssertionError(f"the look went to {facts.get('path')}, not the user's "
                                 f"default ledger under {self.home}")
        self.tally["looks"] += 1
        self.tally[f"charged by {facts.get('joined_by')}"] += 1
        self.tally.setdefault("model keys", set()).add(facts.get("model_key"))
        if out.recommended is not None:
            self.tally.setdefault("false PASS at look", Counter())[facts.get("look")] += 1
        return out.recommended is not None


def _note(tally: Counter, users: int, extra: str = "") -> str:
    keys = tally.pop("model keys", set())
    looks = tally.pop("looks", 0)
    at = tally.pop("false PASS at look", Counter())
    charged = ", ".join(f"{k.removeprefix('charged by ')} {v}" for k, v in sorted(tally.items()))
    passes = ", ".join(f"{k}: {v}" for k, v in sorted(at.items())) or "none"
    return (f"{looks} looks of {users} users ({looks / max(users, 1):.2f} each); "
            f"charged by: {charged}; false PASS at look {passes}; model keys {len(keys)}{extra}")


def seeds_new_cache_k10(bench, sims: int, rng, loss_factor: float) -> float:
    vv = _harness(bench)
    from quantkit.run.verdicts import signoff_threshold

    s = bench.row_settings()
    loss = loss_factor * signoff_threshold(s, "accuracy") * vv.P_REF
    pool = bench.texts(N_POOL)
    tally: Counter = Counter()
    hits = 0
    for _ in range(sims):
        user = _User(vv, bench, s, rng, tally)
        y, right = rng.integers(0, 2, N_POOL), rng.random(N_POOL) < vv.P_REF
        for k in range(K_SEEDS):  # seed k: a new split of the pool, new candidates
            idx = np.sort(rng.choice(N_POOL, vv.N_TEST, replace=False))
            dev = vv.draw_accuracy(rng, vv.N_DEV, loss)
            test = vv.draw_accuracy(rng, vv.N_TEST, loss, ref=(y[idx], right[idx]))
            cache = bench.tmp / "caches" / f"user{bench.users}-seed{k}"
            if user.look(dev, test, seed=k, texts=[pool[i] for i in idx], cache_dir=cache):
                hits += 1
                break
    bench.notes["seeds_new_cache_k10"] = _note(tally, sims)
    return hits / sims


def reexport_row(bench, sims: int, rng, loss_factor: float) -> float:
    vv = _harness(bench)
    from quantkit.models.fingerprint import fingerprint_model
    from quantkit.run.verdicts import signoff_threshold

    s = bench.row_settings()
    loss = loss_factor * signoff_threshold(s, "accuracy") * vv.P_REF
    original, again = bench.ctx0.model, bench.reexported()
    fps = [fingerprint_model(onnx.load(m.path)) for m in (original, again)]
    tally: Counter = Counter()
    hits = 0
    for _ in range(sims):
        user = _User(vv, bench, s, rng, tally)
        dev = vv.draw_accuracy(rng, vv.N_DEV, loss)
        test = vv.draw_accuracy(rng, vv.N_TEST, loss)
        fixed = (test.labels, test.ref.argmax(axis=1) == test.labels)
        for k in range(K_REEXPORT):
            if k:
                dev = vv.draw_accuracy(rng, vv.N_DEV, loss)
                test = vv.draw_accuracy(rng, vv.N_TEST, loss, ref=fixed)
            if user.look(dev, test, seed=k, model=again if k % 2 else None):
                hits += 1
                break
    bench.notes["reexport"] = _note(
        tally, sims, f"; files {original.sha256[:8]} / {again.sha256[:8]}, fingerprints "
                     f"{'match' if fps[0].matches(fps[1]) else 'DIFFER'}")
    return hits / sims


def whitespace(bench, sims: int, rng, loss_factor: float) -> float:
    vv = _harness(bench)
    from quantkit.run.verdicts import signoff_threshold

    s = bench.row_settings()
    loss = loss_factor * signoff_threshold(s, "accuracy") * vv.P_REF
    base = accented_texts(vv.N_TEST)
    variants = [[text_variant(t, k) for t in base] for k in range(K_WHITESPACE)]
    tally: Counter = Counter()
    hits = 0
    for _ in range(sims):
        user = _User(vv, bench, s, rng, tally)
        dev = vv.draw_accuracy(rng, vv.N_DEV, loss)
        test = vv.draw_accuracy(rng, vv.N_TEST, loss)
        fixed = (test.labels, test.ref.argmax(axis=1) == test.labels)
        for k in range(K_WHITESPACE):
            if k:
                dev = vv.draw_accuracy(rng, vv.N_DEV, loss)
                test = vv.draw_accuracy(rng, vv.N_TEST, loss, ref=fixed)
            if user.look(dev, test, seed=k, texts=variants[k]):
                hits += 1
                break
    bench.notes["whitespace"] = _note(tally, sims)
    return hits / sims


def fresh_data_no_supersedes(bench, sims: int, rng, loss_factor: float) -> float:
    vv = _harness(bench)
    from quantkit.run.verdicts import signoff_threshold

    s = bench.row_settings()
    loss = loss_factor * signoff_threshold(s, "accuracy") * vv.P_REF
    tally: Counter = Counter()
    hits = 0
    for _ in range(sims):
        user = _User(vv, bench, s, rng, tally)
        for j in range(K_FRESH):  # fresh examples each time: none shared with earlier looks
            dev = vv.draw_accuracy(rng, vv.N_DEV, loss)
            test = vv.draw_accuracy(rng, N_FRESH, loss)
            if user.look(dev, test, texts=bench.texts(N_FRESH, j * N_FRESH)):
                hits += 1
                break
    bench.notes["fresh_data_no_supersedes"] = _note(tally, sims)
    return hits / sims


ROW_FUNCTIONS = {"seeds_new_cache_k10": seeds_new_cache_k10, "reexport": reexport_row,
                 "whitespace": whitespace, "fresh_data_no_supersedes": fresh_data_no_supersedes}
