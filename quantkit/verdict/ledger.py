"""Looks at the test split across runs: what one look is, which earlier looks it is charged
against, and the one-sided alpha it is tested at. The one place these rules live; the
store that keeps the looks (a SQLite file or a PostgreSQL team ledger) is
:mod:`quantkit.ledger_store`, the stage that uses both
is :func:`quantkit.run.stages.signoff.signoff`.

Definitions
-----------

* **Example id**: sha256 of one test example's *source content*, before any preprocessing
  (:mod:`quantkit.data.identity`: a text NFC-normalized with its whitespace collapsed; an
  image file's bytes, or its pixels as decoded at source size). Labels are left out, so a
  relabelled copy of an example is the same example; tokenizer, ``data.max_length`` and
  ``data.image.*`` never enter, so they make no new examples.
* **Model** (:func:`model_key`): a declared ``model.id`` names it. Else an ONNX file the user
  brings is its fingerprint (:mod:`quantkit.models.fingerprint`: weights digest plus FP32
  outputs on a fixed probe), so a re-export of the same network is the same model; the
  ledger files it under the first registered fingerprint that matches. A model quantkit
  prepares (zoo / hub: a pretrained encoder with a classification head fitted on the seeded
  train split) is its source and name: each ``seed`` fits another head, and re-drawing the
  seed to get another head and another test split is still a re-look at the same model.
* **Look**: one familywise decision of a declared sign-off family of one model from
  test-split evaluations. Every run that decides anything
  from test outputs (new logits or cached ones) makes a look, whatever changed (seed,
  margin, metric, family, order, alpha, settings). Not a look: reading the decision of an
  identical earlier look (:func:`decision_key`), a sign-off in which no member was tested
  (each was below ``verdict.min_power``), or an **execution check**: the artifacts a decided
  look tested, on its test data and settings (:func:`look_basis`), run by another
  execution (``backend=trt`` after ONNX Runtime, another ``backend.qdq_mode`` or host). A
  check is tested at that look's alpha and can only take a PASS away
  (:func:`both_executions`: a member PASSes only where every execution PASSes), so it
  spends nothing.
* **Same data**: two looks of one model are on the same data when their test example sets
  share at least one example id (any overlap: a new seed that re-draws test from the same
  pool, a grown or shrunk split, a reordered one). A **data lineage** is the transitive
  closure of "same data" over the model's looks, plus ``verdict.supersedes``: a look that
  names an earlier one joins that look's lineage whatever the overlap (a declared re-test).
* **Every look of a model counts** (:func:`charged_lineage`): a look whose test set shares no
  example with the model's earlier looks and supersedes none is charged to the lineage of
  the model's latest look, unless the run declares a new study
  (``verdict.new_study=<reason>``, recorded): then it starts a lineage with a fresh budget. A
  new study on test data that overlaps earlier looks is still charged (the examples were
  seen).

* **Looks moved between ledgers** (``quantkit ledger export`` / ``import``): a look keeps its
  id, alpha and number; importing a look the ledger already holds adds nothing. A lineage of
  imported looks new to the ledger joins (:func:`imported_lineages`) the ledger's lineages
  it already shares a look with (an earlier import), those whose looks share an example
  with it, else, unless it was opened by a new study, the model's latest lineage: where the
  looks would have been charged had they been reserved in this ledger. Alpha the two
  ledgers spent apart stays spent: a later look of the joined lineage is charged for all.

Alpha spending across looks
---------------------------

Look ``k`` (1-based, in order of reservation) of a lineage is tested at one-sided::

    alpha_k = min(B * (1 - gamma) * gamma^(k - 1),  B - (alpha already spent in the lineage))

with ``gamma`` = :data:`SPENDING_RATIO` and ``B`` the budget: the smallest one-sided alpha
declared by any look of the lineage (this one included), so raising ``verdict.alpha`` later
buys nothing. The shares sum to at most ``B``; by the union (Bonferroni) bound the
probability that *any* look of the lineage makes a false PASS is at most ``B``, for any
dependence between looks (overlapping examples) and any rule for when to look again (e.g.
stopping at the first PASS). This is alpha spending (Lan & DeMets 1983, Biometrika
70:659-663) with looks that are neither planned nor counted in advance, so the union bound
replaces the group-sequential joint distribution. Inside a look the familywise rule of the
family (fixed sequence or Holm, :mod:`quantkit.verdict.protocol`) runs at ``alpha_k``.

``gamma = 0.1`` (look 1 at 0.9 alpha, look 2 at 0.09 alpha, look 3 at 0.009 alpha, ...) is
the largest ratio whose look-1 power, simulated with the run's own ``paired_signoff`` for a
test split planned for 80% power, stays within 0.015 of the power at full alpha; re-drawing
the test split with new seeds and keeping the best then no longer inflates the false-PASS
rate beyond alpha (benchmarks/ledger_spending.py; measured:
benchmarks/results/ledger_spending.md).

Pure: no I/O, no randomness.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from quantkit.errors import ConfigError

__all__ = ["JOINED_BY", "LookAlpha", "MIN_SHARED_EXAMPLES", "RULE", "SPENDING_RATIO",
           "SpentLook", "both_executions", "charged_lineage", "decision_key", "imported_lineages",
           "join_lineages",
           "look_alpha", "look_basis", "model_key", "same_data", "same_data_rule"]

#: gamma of the geometric spending sequence (module docstring: why 0.1)
SPENDING_RATIO = 0.1
#: the rule's name as stored with every look (a change of rule is visible in the ledger)
RULE = f"geometric alpha spending over the looks of a data lineage, gamma={SPENDING_RATIO:g}"
#: below this a look has no alpha left to test with ("alpha of this data is spent")
MIN_ALPHA = 1e-12


#: two looks are on the same data when they share at least this many examples
MIN_SHARED_EXAMPLES = 1


def same_data(shared_examples: int) -> bool:
    """Whether two looks of one model that share ``shared_examples`` examples are on the
    same data (module docstring: any overlap)."""
    return int(shared_examples) >= MIN_SHARED_EXAMPLES


def join_lineages(lineage_of: Mapping[str, str], shared: Mapping[str, int],
                  first_look: Mapping[str, int], superseded: str | None = None
                  ) -> tuple[str | None, set[str]]:
    """The lineage a new look joins and the lineages merged into it.

    ``lineage_of``: earlier look id -> its lineage; ``shared``: earlier look id -> examples
    it shares with the new look; ``first_look``: lineage -> position of its first look
    (older first); ``superseded``: the lineage of the look named by verdict.supersedes.
    Returns (None, set()) when the new look starts a lineage of its own.
    """
    joined = {lineage_of[i] for i, k in shared.items() if same_data(k)}
    if superseded is not None:
        joined.add(superseded)
    if not joined:
        return None, set()
    target = min(joined, key=lambda lin: first_look[lin])
    return target, joined - {target}


#: how a look came to be charged where it is (``LookAlpha.joined_by``) -> the words after
#: "look k of this model"
JOINED_BY = {
    "first": "on these test examples",
    "overlap": "on these test examples",
    "supersedes": "on these test examples (a declared re-test: verdict.supersedes)",
    "model": "(its earlier looks were on other test data: every look of a model counts)",
    "new_study": "in a new study (verdict.new_study)",
}


def charged_lineage(target: str | None, current: str | None, new_study: bool
                    ) -> tuple[str | None, str]:
    """(the lineage a look is charged to, why) after :func:`join_lineages` found ``target``
    (None: no overlap, supersedes none). ``current``: the lineage of the model's latest look
    (None: the model has no look). Module docstring, "Every look of a model counts"."""
    if target is not None:
        return target, "overlap"
    if current is None:
        return None, "first"
    if new_study:
        return None, "new_study"
    return current, "model"


def imported_lineages(known: set[str], overlapping: set[str], current: str | None,
                      new_study: bool) -> set[str]:
    """The lineages of this ledger that a lineage of looks imported from another ledger joins
    (module docstring, "Looks moved between ledgers"): ``known``, those holding a look of it
    already; ``overlapping``, those whose looks share an example with its looks; else the
    model's latest lineage ``current`` unless the lineage was opened by a new study. Empty:
    it stays a lineage of its own."""
    joined = set(known) | set(overlapping)
    if joined:
        return joined
    lineage, _ = charged_lineage(None, current, new_study)
    return {lineage} if lineage is not None else set()


def same_data_rule() -> str:
    """One sentence for records and reports: what "the same test data" means here."""
    return ("looks of one model are on the same data when their test sets share at least one "
            "example (sha256 of the example's source content before preprocessing); a lineage "
            "is the transitive closure, plus looks linked by verdict.supersedes; a look on "
            "other data joins the model's latest lineage unless verdict.new_study declares a "
            "new study")


@dataclass(frozen=True)
class SpentLook:
    """What an earlier look of the lineage spent: its alpha and the alpha it declared."""

    alpha: float
    alpha_declared: float


@dataclass(frozen=True)
class LookAlpha:
    """The alpha of look ``number`` of a lineage (module docstring)."""

    number: int
    alpha: float  # one-sided alpha this look is tested at (0: nothing left)
    alpha_declared: float  # verdict.alpha / 2 of this run
    budget: float  # B: the smallest declared alpha of the lineage
    spent_before: float  # sum of the earlier looks' alpha
    share: float  # the rule's share for this look number before the cap
    rule: str = RULE
    joined_by: str = "overlap"  # a key of JOINED_BY: why the look is charged where it is

    @property
    def exhausted(self) -> bool:
        return self.alpha < MIN_ALPHA

    def describe(self) -> str:
        head = f"look {self.number} of this model {JOINED_BY.get(self.joined_by, '')}".rstrip()
        if self.exhausted:
            return (f"{head}: no alpha left (budget {self.budget:g}, spent "
                    f"{self.spent_before:.4g})")
        return (f"{head}: one-sided alpha {self.alpha:.4g} of the declared "
                f"{self.alpha_declared:g}" + (f" ({self.number - 1} earlier look(s) spent "
                                               f"{self.spent_before:.4g})"
                                               if self.number > 1 else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"look": self.number, "alpha_one_sided": self.alpha,
                "alpha_declared": self.alpha_declared, "budget": self.budget,
                "spent_before": self.spent_before, "share": self.share, "rule": self.rule,
                "exhausted": self.exhausted}


def _alpha(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0.0 < float(value) < 0.5:
        raise ConfigError("a declared one-sided alpha must be in (0, 0.5)", where=where,
                          value=value, fix="use verdict.alpha=0.05 (one-sided 0.025)")
    return float(value)


def _down(x: float) -> float:
    """``x`` rounded down to 15 decimals (0.0225, not 0.022500000000000003): never more."""
    return math.floor(x * 1e15) / 1e15


def look_alpha(alpha_declared: float, earlier: Sequence[SpentLook]) -> LookAlpha:
    """The alpha of the next look of a lineage whose earlier looks are ``earlier``."""
    a = _alpha(alpha_declared, "verdict.alpha")
    budget = min([a, *(_alpha(e.alpha_declared, "ledger look") for e in earlier)])
    spent = float(sum(max(float(e.alpha), 0.0) for e in earlier))
    k = len(earlier) + 1
    share = _down(budget * (1.0 - SPENDING_RATIO) * SPENDING_RATIO ** (k - 1))
    alpha = max(0.0, min(share, _down(budget - spent)))
    return LookAlpha(number=k, alpha=alpha, alpha_declared=a, budget=budget,
                     spent_before=spent, share=share)


def model_key(*, kind: str, sha256: str, source: str = "", name: str | None = None,
              declared: str | None = None, fingerprint: str | None = None
              ) -> tuple[str, str]:
    """(the key the ledger files a model's looks under, what it rests on): module docstring,
    "Model". ``declared``: ``model.id``; ``fingerprint``: the key of a user model's
    fingerprint (quantkit.models.fingerprint.ModelFingerprint.key)."""
    if declared:
        return (hashlib.sha256(f"quantkit-declared\x1f{declared}".encode()).hexdigest(),
                f"declared model.id {declared!r}")
    if (kind == "onnx" or not source) and fingerprint:
        return fingerprint, ("the model's fingerprint: weights digest and FP32 outputs on a "
                             "fixed probe (a re-export of the same network is the same model)")
    if kind == "onnx" or not source:
        return sha256, "the sha256 of the ONNX file"
    body = f"quantkit-prepared\x1f{kind}\x1f{name or ''}\x1f{source}"
    return (hashlib.sha256(body.encode()).hexdigest(),
            f"{kind} model {name or ''} prepared by quantkit from {source}: the head fitted per "
            "seed and head settings are the same model for the ledger")


def look_basis(**parts: Any) -> str:
    """sha256 of what a look decides about, apart from the execution that produced its
    numbers (backend, Q/DQ mode, host) and the dev evidence that execution gave: the model
    file, the test split, the verdict settings, seed and feeds. Two runs with the same basis
    whose members are a decided look's artifacts are that look and an execution check of it
    (module docstring, "Look")."""
    return decision_key(**parts)


#: a member's status across executions: the weakest wins (FAIL < INCONCLUSIVE < PASS)
_RANK = {"FAIL": 0, "INCONCLUSIVE": 1, "PASS": 2}


def both_executions(first: Mapping[str, str], check: Mapping[str, str]) -> dict[str, str]:
    """candidate -> its status when a look's decision (``first``) and an execution check of
    it (``check``) must both hold: PASS only where both PASS, FAIL where either FAILs, else
    INCONCLUSIVE; a candidate the check did not decide stays INCONCLUSIVE. Requiring both
    tests to reject (an intersection) keeps the look's false-PASS rate at its alpha."""
    out = {}
    for name, status in first.items():
        other = check.get(name, "INCONCLUSIVE")
        out[name] = min(status, other, key=lambda s: _RANK.get(s, 1))
    return out


def decision_key(**parts: Any) -> str:
    """sha256 of everything a test-split decision depends on (model, test examples in order,
    family members and their artifacts, dev basis, verdict settings, seed, evaluation
    environment). Two runs with the same key make the same decision, so the later one
    reads the earlier instead of looking again."""
    body = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()
