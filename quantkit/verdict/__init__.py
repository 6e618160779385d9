"""quantkit.verdict: paired statistics and the PASS | FAIL | INCONCLUSIVE verdict.

Pure numpy/scipy; randomness only from the seed of the :class:`TestPolicy` passed in (the
knobs of every test: alpha, bootstrap resamples and seed, minimum examples and groups,
power; built once from ``settings.verdict`` by ``TestPolicy.from_settings``). Decision rules are
documented in ``quantkit.verdict.paired_accuracy`` (one candidate: score + bootstrap intervals,
groups, churn, agreement, label-free shares), ``quantkit.verdict.macro_f1`` (macro-F1),
``quantkit.verdict.power`` (planned test sizes) and
``quantkit.verdict.protocol`` (dev-declared family, test ledger, familywise decision,
recommendation) for the dev / test sign-off, ``quantkit.verdict.rule_power`` (power of the
rule actually used, simulated) and ``quantkit.verdict.ledger`` (looks across runs: what one
is, which share test data, the alpha of look k).
"""

from __future__ import annotations

from quantkit.verdict.margin import Margin, check_alpha, check_n_boot, margin_abs
from quantkit.verdict.policy import TestPolicy
from quantkit.verdict.cluster import GroupStats, intra_group_correlation
from quantkit.verdict.power import (PowerPlan, required_agreement_size, required_score_size,
                                    required_test_size)
from quantkit.verdict.protocol import (
    FamilyDecision,
    FamilyPlan,
    Recommendation,
    SignoffFamily,
    TestLedger,
    TestSplitReuse,
    decide_family,
    declare_family,
    declare_powered_family,
    plan_family,
    recommend_candidate,
    signoff_record,
)
from quantkit.verdict.score import (clopper_pearson_interval, newcombe_interval, tango_interval,
                                    wilson_interval)
from quantkit.verdict.outcome import FAIL, INCONCLUSIVE, PASS, SignoffTest, plan_power, with_gate
from quantkit.verdict.paired_accuracy import paired_signoff
from quantkit.verdict.share_tests import Churn, agreement_signoff, churn, churn_gate, score_signoff
from quantkit.verdict.paired import holm_adjust
from quantkit.verdict.macro_f1 import macro_f1_signoff  # after signoff: it builds on it

__all__ = [
    "FamilyDecision",
    "FamilyPlan",
    "GroupStats",
    "PowerPlan",
    "Recommendation",
    "SignoffFamily",
    "SignoffTest",
    "TestLedger",
    "TestPolicy",
    "TestSplitReuse",
    "Churn",
    "agreement_signoff",
    "churn",
    "churn_gate",
    "clopper_pearson_interval",
    "decide_family",
    "declare_family",
    "declare_powered_family",
    "intra_group_correlation",
    "macro_f1_signoff",
    "newcombe_interval",
    "paired_signoff",
    "plan_family",
    "plan_power",
    "recommend_candidate",
    "signoff_record",
    "required_agreement_size",
    "required_score_size",
    "score_signoff",
    "required_test_size",
    "tango_interval",
    "wilson_interval",
    "with_gate",
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "Margin",
    "check_alpha",
    "check_n_boot",
    "holm_adjust",
    "margin_abs",
]
