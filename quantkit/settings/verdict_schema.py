"""verdict.* schema: the sign-off metric, margin and test ledger; the verdict checks."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from quantkit.errors import ConfigError
from quantkit.ledger_dialect import DATABASE_SCHEMES, is_database_url, mask_secrets
from quantkit.settings.value_checks import _choice, _positive


#: detection outputs: COCO mAP@[.5:.95], mAP@.5, mAP@.75 (against the labels, or label-free
#: against FP32's detections), tested by the paired image bootstrap at the margin
MAP_METRICS = ("map", "map50", "map75")
#: verdict.metric: labeled (accuracy, macro_f1) and label-free per-example scores vs FP32,
#: and a detector's mAP
VERDICT_METRICS = ("accuracy", "macro_f1", "agreement", "kl", "abs_logit", "cosine",
                   "recall_at_k") + MAP_METRICS


@dataclass
class VerdictConfig:
    # accuracy | macro_f1 (labels); label-free, per-example scores vs FP32: agreement,
    # kl, abs_logit (logit outputs), cosine, recall_at_k (embedding outputs); detectors:
    # map (mAP@[.5:.95], the default for a detector) | map50 | map75
    metric: str = "accuracy"
    margin: float = 0.01
    margin_kind: str = "relative"  # relative | absolute
    alpha: float = 0.05  # two-sided interval level 1 - alpha; sign-off is one-sided alpha / 2
    n_boot: int = 2000
    # dev / test sign-off (quantkit/verdict/protocol.py)
    family: str = "fixed_sequence"  # familywise control: fixed_sequence (dev order) | holm
    min_n: int = 100  # fewer examples: INCONCLUSIVE whatever the interval
    # grouped data with fewer groups: INCONCLUSIVE (group_validity.py); covers a loss spread
    # over >= 10% of the groups, not one in a few groups (quantkit/verdict/policy.py)
    min_groups: int = 75
    power: float = 0.8  # planned power of the test split at the margin
    max_flip_rate: Optional[float] = 0.10  # churn gate vs FP32 predictions; null = no gate
    min_agreement: float = 0.99  # the declared minimum for metric=agreement (label-free)
    # Hydra multirun jobs compare settings on dev and leave the test split alone; the
    # sweep's chosen setting is signed off by one plain run (true: every job signs off)
    signoff_in_sweeps: bool = False
    # a re-test (e.g. an INCONCLUSIVE re-tested on a grown or fresh test split) is another
    # look: the id (or a unique prefix, >= 8 hex) of the earlier look it replaces
    # (record.signoff.ledger.look_id, `quantkit ledger`); the new look joins that look's
    # lineage and is charged (quantkit/verdict/ledger.py)
    supersedes: Optional[str] = None
    # the persistent test ledger: every look at the test split of a model, across runs, apart
    # from any cache; null = $XDG_DATA_HOME/quantkit/ledger.sqlite (else
    # ~/.local/share/quantkit/ledger.sqlite). A team shares one file on one host's local disk,
    # or a PostgreSQL database: postgresql://user@host:5432/db (quantkit/ledger_dialect.py)
    ledger: Optional[str] = None
    # deprecated alias of verdict.ledger (kept so that command lines and sweep configs that
    # name a ledger keep reaching the same file; a log line says to rename it)
    ledger_path: Optional[str] = None
    # a look on test data that shares no example with the model's earlier looks is charged
    # against the model's budget (every look of a model counts); a new study with its own
    # budget is declared here, with its reason (recorded, shown in the report and summary)
    new_study: Optional[str] = None
    # a family member whose planned power on the test split (for the decision rule used,
    # at the look's alpha) is below this is not tested: the test split is not spent on it
    min_power: float = 0.5
    # simulated test splits per planned power (quantkit/verdict/rule_power.py); 0: the
    # analytic approximation only (simulation benchmarks that plan thousands of times)
    power_sims: int = 400
    # label-free scores vs FP32, tested as the share of examples within a per-example
    # tolerance (exact binomial bound; quantkit/verdict/share_tests.py score_signoff):
    min_cosine: float = 0.99  # metric=cosine: per-example floor of the cosine to FP32
    recall_k: int = 10  # metric=recall_at_k: neighbours per query, searched in the gallery
    min_recall: float = 0.9  # metric=recall_at_k: per-query floor of recall@k of FP32's
    gallery_size: int = 1000  # recall@k gallery: seeded train examples (all when fewer)
    max_kl: float = 0.01  # metric=kl: per-example ceiling of KL(FP32 || candidate), nats
    max_abs_logit: float = 0.1  # metric=abs_logit: per-example ceiling of mean |logit delta|
    # at most this share of examples may be outside the tolerance (0.05: the 5% quantile
    # of cosine >= min_cosine, the 95% quantile of KL <= max_kl); PASS when the exact lower
    # bound of the share within it is above 1 - score_quantile
    score_quantile: Optional[float] = 0.05


def validate_verdict(v: VerdictConfig) -> None:
    """Metric, margin, interval level, family and per-example tolerances (verdict.*)."""
    _choice("verdict.metric", v.metric, VERDICT_METRICS)
    _choice("verdict.margin_kind", v.margin_kind, ("relative", "absolute"))
    validate_ledger(v)
    if v.margin_kind == "relative" and not 0.0 < v.margin < 1.0:
        raise ConfigError("config key verdict.margin (relative) must be in (0, 1)",
                          value=v.margin, fix="e.g. verdict.margin=0.01 for 99% of FP32")
    if v.margin_kind == "absolute" and v.margin < 0:
        raise ConfigError("config key verdict.margin (absolute) must be >= 0",
                          value=v.margin, fix="e.g. verdict.margin=0.005")
    if not 0.0 < v.alpha < 1.0:
        raise ConfigError("config key verdict.alpha must be in (0, 1)", value=v.alpha,
                          fix="e.g. verdict.alpha=0.05")
    _positive("verdict.n_boot", v.n_boot)
    _choice("verdict.family", v.family, ("fixed_sequence", "holm"))
    _positive("verdict.min_n", v.min_n)
    _positive("verdict.min_groups", v.min_groups)
    _positive("verdict.recall_k", v.recall_k)
    _positive("verdict.gallery_size", v.gallery_size)
    if v.score_quantile is None and v.metric in ("cosine", "recall_at_k", "kl",
                                                                  "abs_logit"):
        raise ConfigError(f"verdict.metric={v.metric} is tested as the share of "
                          "examples within a per-example tolerance; score_quantile=null (the "
                          "test of the mean) is gone: not valid for skewed or heavy-tailed "
                          "scores", where="verdict.score_quantile", value=None,
                          fix="set verdict.score_quantile=0.05 (at least 95% of examples "
                              "within the tolerance), or another share")
    for key, value in (("verdict.max_kl", v.max_kl),
                       ("verdict.max_abs_logit", v.max_abs_logit)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"config key {key} must be a number > 0", value=value,
                              fix=f"e.g. {key}=0.01")
    for key, value in (("verdict.power", v.power),
                       ("verdict.min_agreement", v.min_agreement),
                       ("verdict.min_cosine", v.min_cosine),
                       ("verdict.min_recall", v.min_recall),
                       ("verdict.score_quantile", v.score_quantile),
                       ("verdict.max_flip_rate", v.max_flip_rate)):
        if value is not None and not 0.0 < value < 1.0:
            raise ConfigError(f"config key {key} must be in (0, 1)", value=value,
                              fix="e.g. verdict.power=0.8, verdict.min_agreement=0.99, "
                                  "verdict.max_flip_rate=0.10 (null: no churn gate)")


def _ledger_url(key: str, value: str) -> None:
    """``value`` of ``key`` is a database URL a team ledger can be kept at: PostgreSQL's,
    naming its database, and only under ``verdict.ledger``."""
    shown = mask_secrets(value)
    scheme = value.split("://", 1)[0].lower()
    if key != "verdict.ledger":
        raise ConfigError(f"config key {key} names a file; a database URL goes to "
                          "verdict.ledger", value=shown, fix=f"verdict.ledger={shown}")
    if scheme not in DATABASE_SCHEMES:
        raise ConfigError(f"config key {key} names a {scheme}:// database; a team test ledger "
                          "is kept in PostgreSQL", value=shown,
                          fix="e.g. verdict.ledger=postgresql://user@host:5432/quantkit_ledger, "
                              "or a SQLite file path")
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port that is not a number raises here
    except ValueError as exc:
        raise ConfigError(f"config key {key} is not a valid database URL ({exc})",
                          value=shown, fix="e.g. verdict.ledger=postgresql://user@host:5432/"
                                           "quantkit_ledger") from exc
    if not parts.path.strip("/"):
        raise ConfigError(f"config key {key} must name the ledger's database", value=shown,
                          fix=f"e.g. verdict.ledger={shown.rstrip('/')}/quantkit_ledger (a "
                              "database of its own: createdb quantkit_ledger)")


def _ledger_file(key: str, value: str) -> None:
    """``value`` of ``key`` names a file that can be a ledger (not a dir, not under a file),
    or a team ledger's database URL (:func:`_ledger_url`)."""
    path = str(value).strip()
    if is_database_url(path):
        _ledger_url(key, path)
        return
    target = Path(path).expanduser() if path else None
    if target is None or target.is_dir() or path.endswith(("/", os.sep)):
        raise ConfigError(f"config key {key} must name a file", value=value,
                          fix="e.g. verdict.ledger=/srv/quantkit/ledger.sqlite (a local file "
                              "system: SQLite's WAL mode does not work over NFS), or null for "
                              "the user data dir's quantkit/ledger.sqlite")
    parent = next((p for p in target.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ConfigError(f"config key {key} lies under a file", value=value,
                          fix=f"{parent} is a file: choose a path in a directory")


def validate_ledger(v: VerdictConfig) -> None:
    """verdict.supersedes (a look id), verdict.ledger (and its deprecated alias
    verdict.ledger_path), verdict.new_study and verdict.min_power."""
    if v.supersedes is not None and not re.fullmatch(r"[0-9a-f]{8,64}", str(v.supersedes)):
        raise ConfigError("config key verdict.supersedes must be the id of an earlier look "
                          "(8 to 64 hex characters)", value=v.supersedes,
                          fix="copy record.signoff.ledger.look_id of the run this re-test "
                              "replaces (or an id from `quantkit ledger`)")
    for key, value in (("verdict.ledger", v.ledger), ("verdict.ledger_path", v.ledger_path)):
        if value is not None:
            _ledger_file(key, value)
    if v.ledger is not None and v.ledger_path is not None and \
            (is_database_url(str(v.ledger)) or
             Path(str(v.ledger)).expanduser() != Path(str(v.ledger_path)).expanduser()):
        raise ConfigError("verdict.ledger and its deprecated alias verdict.ledger_path name "
                          "two different files", where="verdict.ledger_path",
                          value=v.ledger_path, fix="drop verdict.ledger_path (verdict.ledger "
                                                   "replaces it)")
    if v.new_study is not None and not str(v.new_study).strip():
        raise ConfigError("config key verdict.new_study must say why this is a new study",
                          value=v.new_study, fix="e.g. verdict.new_study='fresh data collected "
                                                 "in 2025-06' (null: no new study)")
    _positive("verdict.power_sims", v.power_sims, allow_zero=True)
    if isinstance(v.min_power, bool) or not isinstance(v.min_power, (int, float)) \
            or not 0.0 <= v.min_power < 1.0:
        raise ConfigError("config key verdict.min_power must be in [0, 1)", value=v.min_power,
                          fix="e.g. verdict.min_power=0.5 (0: test every declared member "
                              "whatever its planned power)")
