"""The dev / test sign-off of the record (``record.signoff``, schema 2 on): the family declared
on dev, its power plan, this run's test ledger, each member's test, the familywise
decision, the recommendation and this look of the persistent ledger (schema 3); or why the
test split was left alone (a sweep job). The family, plan and decision are also what the
persistent ledger stores of a look (quantkit/ledger_store.py), read back by the sign-off
stage through the same types (:mod:`quantkit.verdict.protocol`)."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.record.serde import encode, inline, optional
from quantkit.record.verdict import TestRecord
from quantkit.verdict.cluster import GroupStats
from quantkit.verdict.protocol import FamilyDecision, FamilyPlan, SignoffFamily

__all__ = ["DecisionRecord", "DecisionRow", "DecisionTest", "EarlierLook", "ExecutionCheckFacts",
           "FamilyBasis", "FamilyNotTested",
           "FamilyRecord", "LedgerEvaluation", "LookFacts", "LookOfDecision", "LookRecord",
           "PowerPlanRecord", "PowerRow", "RecommendationRecord", "RulePlan", "AnalyticPlan", "SignoffRecord", "SignoffSkipped", "TestLedgerRecord"]


@dataclass
class RecommendationRecord:
    """``record.recommendation`` (verdict.protocol.Recommendation): the candidate and why;
    without a sign-off only the candidate (None) and the reason."""

    candidate: str | None
    reason: str
    eligible: list[str] | None = optional()
    excluded: dict[str, str] | None = optional()
    basis: str | None = optional()


@dataclass
class FamilyBasis:
    """The dev evidence a member's place in the test order rests on."""

    dev_status: str
    dev_point: float | None
    dev_low: float | None
    dev_high: float | None
    dev_p_noninferiority: float | None
    dev_n: int
    dev_flip_rate: float | None


@dataclass
class FamilyRecord:
    """The declared family (verdict.protocol.SignoffFamily.to_dict): its candidates in test
    order, the method, the one-sided alpha, the dev basis of the order and the sha256 of
    the declaration."""

    candidates: list[str]
    order: list[str]
    method: str
    alpha_one_sided: float
    order_rule: str
    basis: dict[str, FamilyBasis]
    supersedes: str | None
    sha256: str

    def declared(self) -> SignoffFamily:
        """The declaration this is the record of (a look the persistent ledger stored)."""
        return SignoffFamily(tuple(self.candidates), self.method, self.alpha_one_sided,
                             {n: encode(b) for n, b in self.basis.items()}, self.order_rule,
                             self.supersedes)


@dataclass
class FamilyNotTested:
    """The family of a sign-off that tested no member: empty, and who was left out."""

    candidates: list[str]
    not_tested: list[str]


@dataclass
class RulePlan:
    """How the planned power was computed for the rule actually used (schema 3 on)."""

    power_method: str | None
    power_sims: int | None
    n_required_formula: int | None
    min_power: float | None


@dataclass
class AnalyticPlan:
    """The analytic plan a member's row rests on (verdict/power.py: PowerPlan): its basis,
    the power planned for, the metric, the effect planned at, the margin, the flip rate
    and the design effect."""

    basis: str
    power: float
    metric: str
    planned_effect: float | None
    margin: float | None
    flip_rate: float | None
    design_effect: float | None


@dataclass(kw_only=True)
class PowerRow:
    """One member's power plan (verdict/power.py: PowerPlan, rule_power.plan_by_rule):
    the test size the rule needs, the planned power on the test split, whether it is
    tested; the bare row of a look whose alpha is spent has no analytic plan."""

    candidate: str
    n_required: int | None
    n_available: int | None
    adequate: bool | None
    alpha_one_sided: float
    analytic: AnalyticPlan | None = inline()
    reason: str
    gate: TestRecord | None = optional()
    planned_power: float | None = optional()  # schema 3 on
    rule: RulePlan | None = inline()
    tested: bool | None = optional()
    position: int | None


@dataclass
class PowerPlanRecord:
    """The family's power plan (verdict.protocol.FamilyPlan.to_dict)."""

    rows: list[PowerRow]
    n_test: int | None
    adequate: bool | None
    reason: str

    def planned(self) -> FamilyPlan:
        """The plan this is the record of (its rows as the plan keeps them)."""
        return FamilyPlan([encode(r) for r in self.rows], self.n_test, self.adequate,
                          self.reason)


@dataclass
class LedgerEvaluation:
    """One test evaluation of this run's test ledger."""

    index: int
    candidate: str
    n: int
    evidence_sha256: str | None


@dataclass
class TestLedgerRecord:
    """This run's test ledger (verdict.protocol.TestLedger.to_dict): each member once."""

    __test__ = False  # not a pytest class

    family_sha256: str
    split_sha256: str | None
    evaluations: list[LedgerEvaluation]
    evaluated_once: bool
    missing: list[str]
    complete: bool


@dataclass
class DecisionTest:
    """A tested member's test interval in its decision row."""

    __test__ = False  # not a pytest class

    metric: str
    point: float | None
    low: float | None
    high: float | None
    level: float
    threshold: float
    n: int
    flip_rate: float | None
    plan_n: int | None
    groups: GroupStats | None


@dataclass(kw_only=True)
class DecisionRow:
    """A member's familywise decision: raw and adjusted status, p-values and its test
    interval (verdict.protocol.decide_family)."""

    candidate: str
    position: int
    raw_status: str
    status: str
    reason: str
    p_noninferiority: float
    p_noninferiority_adjusted: float
    p_regression: float
    p_regression_adjusted: float
    tested: DecisionTest | None = inline()  # None: not evaluated on test
    look: int | None = optional()  # schema 3 on
    alpha_one_sided: float | None = optional()


@dataclass
class LookOfDecision:
    """The persistent ledger's look a decision is (its number, id, alpha, rule)."""

    look: int
    id: str
    alpha_one_sided: float
    alpha_declared: float
    rule: str


@dataclass
class DecisionRecord:
    """The familywise decision (verdict.protocol.FamilyDecision.to_dict)."""

    method: str
    alpha_one_sided: float
    order: list[str]
    family_sha256: str
    stopped_at: str | None
    rows: list[DecisionRow]
    look: LookOfDecision | None = optional()  # schema 3 on

    def decided(self) -> FamilyDecision:
        """The decision this is the record of (its rows as the decision keeps them)."""
        return FamilyDecision(self.method, self.alpha_one_sided, tuple(self.order),
                              [encode(r) for r in self.rows], self.family_sha256,
                              self.stopped_at, encode(self.look) if self.look else None)


@dataclass
class EarlierLook:
    """An earlier look of the lineage this look was charged against (ledger_store.Look
    .summary) and the test examples it shares with this one."""

    id: str
    look: int
    started: str
    state: str
    alpha_one_sided: float
    alpha_declared: float
    n_examples: int
    candidates: list[str]
    method: str
    metric: str
    statuses: dict[str, str]
    supersedes: str | None
    run_dir: str
    shared_examples: int
    overlap: float


@dataclass
class LookRecord:
    """The look's own facts (a look was recorded): lineage, when, its test examples, the
    look it supersedes."""

    lineage: str
    started: str
    n_examples: int
    example_set: str
    supersedes: str | None


@dataclass
class ExecutionCheckFacts:
    """The run was the execution check of a decided look (quantkit/verdict/ledger.py,
    "Look"): the look's artifacts on its test examples, run by another execution, tested at
    the look's alpha and charged nothing; each member's status there, here and combined."""

    of_look: str
    first_execution: str
    first_statuses: dict[str, str]
    statuses: dict[str, str]
    combined: dict[str, str]
    check_id: str
    earlier_checks: int
    rule: str


@dataclass(kw_only=True)
class LookFacts:
    """``signoff.ledger``: where the persistent test ledger is, the model key, the spending
    rule, this look's number and alpha, the earlier looks it was charged against; since
    issue 49 also which setting chose the ledger (``location``), what it knew of the model
    (``model_looks``, ``first_in_ledger``, ``ledger_knows``), why the look is charged where
    it is (``joined_by``), the new study declared and the execution check this run was
    (keys absent in records written before)."""

    path: str  # the ledger file, or a PostgreSQL team ledger's URL with its password as ***
    model_key: str
    model_key_basis: str
    rule: str
    same_data: str
    alpha_one_sided: float
    alpha_declared: float
    budget: float
    spent_before: float
    read_from_ledger: bool
    look_id: str | None
    look: int | None
    this_look: LookRecord | None = inline()
    earlier_looks: list[EarlierLook]
    other_data_looks: int | None = optional()
    summary: str
    location: str | None = optional()
    model_looks: int | None = optional()
    first_in_ledger: bool | None = optional()
    ledger_knows: str | None = optional()
    joined_by: str | None = optional()
    new_study: str | None = optional()
    execution_check: ExecutionCheckFacts | None = optional()


@dataclass(kw_only=True)
class SignoffRecord:
    """``record.signoff``: the family (empty when no member had the planned power to be
    tested), its power plan, each member's dev and test evidence, the test ledger, the
    decision, the recommendation, the look and who was not tested."""

    alpha_one_sided: float | None
    method: str | None
    family: FamilyRecord | FamilyNotTested
    power_plan: PowerPlanRecord
    dev: dict[str, TestRecord]
    test_ledger: TestLedgerRecord | None = optional()
    test: dict[str, TestRecord]
    decision: DecisionRecord | None
    recommendation: RecommendationRecord
    ledger: LookFacts | None = optional()  # schema 3 on
    not_tested: dict[str, str] | None = optional()

    def test_of(self, name: str) -> TestRecord | None:
        """The test of member ``name`` (None when it was not tested)."""
        return self.test.get(name)


@dataclass
class SignoffSkipped:
    """``record.signoff`` of a run that left the test split alone, and why (a sweep job)."""

    skipped: str
