"""A candidate's recorded evidence (``record.candidates[name]``): metrics, verdict, plan and
precision counts, per-layer numbers, engine check, slices, latency, artifact facts. A
family member's own entry is its test evidence and its ``dev`` entry its dev evidence;
every other candidate's entry is on dev (``verdict.split == "dev"``)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from quantkit.backends.engine_meta import EngineMeta
from quantkit.ptq.step_record import StepRecord
from quantkit.record.detection import DetectionRecord
from quantkit.record.latency import LatencyStats
from quantkit.record.serde import (
    JsonObject,
    JsonValue,
    decode,
    decoder,
    encode,
    encoder,
    inline,
    optional,
    to_dict_codec,
)
from quantkit.record.verdict import VerdictRecord
from quantkit.verdict.engine_gate import DeploymentBudget, EngineCheckPlan, EngineGate

__all__ = ["AgreementStat", "BackendCheckRecord", "CandidateRecord", "CandidateSignoff",
           "ClassStats", "DevEvidence", "EngineCheckBasis", "Distribution",
           "EmbeddingRecord", "EngineRecord", "FlaggedLayer", "LayerFlags",
           "LayerStats", "Lint", "Metrics", "SliceStat"]


@dataclass
class ClassStats:
    """Per-class precision, recall, F1, support."""

    precision: float
    recall: float
    f1: float
    support: int


@dataclass
class Metrics:
    """A candidate's task metrics (labelled: n, accuracy, macro-F1, per class) and its
    label-free distances to FP32 (agreement, KL, |logit delta|; embeddings: cosine,
    recall@k), in the order the run writes them."""

    n: int | None = optional()
    accuracy: float | None = optional()
    macro_f1: float | None = optional()
    per_class: dict[str, ClassStats] | None = optional()
    agreement: float | None = optional()
    kl: float | None = optional()
    abs_logit: float | None = optional()
    cosine: float | None = optional()
    recall_at_k: float | None = optional()
    # a detector (record/detection.py): COCO mAP against the labels, and against FP32's
    # detections as ground truth (label-free metrics, every candidate)
    map: float | None = optional()
    map50: float | None = optional()
    map75: float | None = optional()
    map_vs_fp32: float | None = optional()
    map50_vs_fp32: float | None = optional()
    map75_vs_fp32: float | None = optional()
    recall50_fp32: float | None = optional()
    mean_iou_fp32: float | None = optional()

    def values(self) -> dict[str, float | int]:
        """Every recorded numeric metric by name (``n`` included), in record order."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "per_class"}
        return {k: v for k, v in values.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def value(self, name: str | None) -> float | int | None:
        """Metric ``name``'s recorded value, None when not recorded."""
        return self.values().get(name) if name is not None else None


@dataclass
class SliceStat:
    """Accuracy and n on one slice value."""

    accuracy: float
    n: int


@dataclass
class AgreementStat:
    """Top-1 agreement with FP32 on one slice value, over ``n`` examples."""

    agreement: float
    n: int


@dataclass
class Histogram:
    counts: list[int]
    edges: list[float]


@dataclass
class Distribution:
    """A per-example metric's summary and histogram (compare/embedding.py: distribution)."""

    n: int
    mean: float
    min: float
    p1: float
    p5: float
    median: float
    p95: float
    max: float
    hist: Histogram


@dataclass
class EmbeddingRecord:
    """``candidate.embedding_fp32``: per-example cosine to FP32, recall@k of FP32's
    neighbours in the gallery (written under ``recall_at_<k>``), top-1 neighbour agreement,
    the gallery; ``note`` when recall@k could not be measured."""

    cosine: Distribution
    recall_k: int
    note: str | None = None
    recall: Distribution | None = None
    top1_neighbour_agreement: float | None = None
    gallery: JsonObject | None = None


@encoder(EmbeddingRecord)
def _encode_embedding(e: EmbeddingRecord) -> JsonValue:
    out: dict[str, JsonValue] = {"cosine": encode(e.cosine)}
    if e.note is not None:
        out["note"] = e.note
    if e.recall is not None:
        out[f"recall_at_{e.recall_k}"] = encode(e.recall)
    if e.top1_neighbour_agreement is not None:
        out["top1_neighbour_agreement"] = e.top1_neighbour_agreement
    if e.gallery is not None:
        out["gallery"] = e.gallery
    out["recall_k"] = e.recall_k
    return out


@decoder(EmbeddingRecord)
def _decode_embedding(data: JsonValue, where: str) -> EmbeddingRecord:
    d = dict(decode(JsonObject, data, where))
    k = decode(int, d.pop("recall_k", None), f"{where}.recall_k")
    return EmbeddingRecord(
        cosine=decode(Distribution, d.pop("cosine", None), f"{where}.cosine"), recall_k=k,
        note=decode(str | None, d.pop("note", None), f"{where}.note"),
        recall=decode(Distribution | None, d.pop(f"recall_at_{k}", None),
                      f"{where}.recall_at_{k}"),
        top1_neighbour_agreement=decode(float | None, d.pop("top1_neighbour_agreement", None),
                                        f"{where}.top1_neighbour_agreement"),
        gallery=decode(JsonObject | None, d.pop("gallery", None), f"{where}.gallery"),
        **_no_more(d, where, "EmbeddingRecord"))


def _no_more(rest: dict, where: str, what: str) -> dict:
    """Nothing: ``rest`` (the keys a custom decoder did not read) must be empty."""
    if rest:
        decode(_Nothing, rest, where)
    return {}


@dataclass
class _Nothing:
    """No keys at all (what :func:`_no_more` checks leftovers against)."""


@dataclass
class EmbeddingOutput:
    """``candidate.output`` of an embedding model: the compared output and its pooling."""

    name: str
    kind: str
    pooling: str
    dims: int


to_dict_codec(EngineMeta)  # backends/engine_meta.py: the engine's metadata file's own form


@dataclass
class EngineRecord:
    """``candidate.engine`` (backend=trt): the engine evaluated, its metadata (TensorRT
    version, GPU, compute capability: backends/engine_meta.py) and the layer checks."""

    engine_path: str
    meta: EngineMeta
    cache_hit: bool
    trtexec: JsonValue
    layers_path: str
    device: int
    tf32: bool
    engine_sha256: str
    int8_check: JsonObject | None = optional()
    fp8_check: JsonObject | None = optional()


@dataclass
class Lint:
    """The Q/DQ lint of the artifact: the rule set and its violations."""

    violations: int
    rules: str | None = optional()  # schema 1 on


# a ptq step's record (ptq/step_record.py); ``groups`` written only when it edited node groups
to_dict_codec(StepRecord, left_out={"groups": []})


@dataclass(kw_only=True)
class LayerStats:
    """One compared tensor of a candidate vs FP32 (the per-layer debug run)."""

    cosine: float | None
    sqnr_db: float | None
    max_abs_error: float | None = optional()  # schema 1 on
    mean_abs_error: float | None = optional()
    relative_error: float | None
    clipping_rate: float | None
    count: int | None = optional()


@dataclass(kw_only=True)
class FlaggedLayer:
    """A tensor whose INT8 noise is compared against the FP16 floor."""

    name: str
    position: int | None = optional()  # schema 1 on
    int8_sqnr_db: float | None = optional()
    fp16_sqnr_db: float | None
    int8_noise: float | None = optional()
    fp16_noise: float | None = optional()
    floor: float | None = optional()
    ratio: float | None
    flagged: bool


@dataclass
class LayerFlags:
    """The per-layer verdict of an INT8 candidate: flagged layers, the first diverging
    tensor and its node (None when none diverges)."""

    flagged_layers: list[FlaggedLayer]
    first_diverging: str | None
    first_diverging_node: str | None


@dataclass
class EngineCheckBasis:
    """What an engine check compares: where the deployment runs and whether this run can
    check it there, the decision metric and the declared budget's split."""

    plan: EngineCheckPlan
    deployment: str
    metric: str
    budget: DeploymentBudget


@dataclass(kw_only=True)
class BackendCheckRecord:
    """``candidate.backend_check``: the engine check (issue 24: ``basis`` and
    ``gates_recommendation`` set) or, in records before it, the backend agreement check
    (``checked``, ``ok``, ``agreement``, ``n``, ``accuracy``)."""

    basis: EngineCheckBasis | None = inline()
    compared: str | None = optional()
    checked: bool
    gates_recommendation: bool | None = optional()
    n: int | None = optional()
    status: str | None = optional()
    ok: bool | None
    gate: EngineGate | None = optional()
    engine_tolerance: float | None = optional()
    planned_n: int | None = optional()  # compared examples a faithful engine needs (power 0.8)
    faithful_power: float | None = optional()  # a faithful engine's power at n
    reason: str | None = optional()
    what_to_run: str | None = optional()
    agreement: float | None = optional()
    accuracy: dict[str, float] | None = optional()

    @property
    def is_engine_check(self) -> bool:
        return self.gates_recommendation is not None


@dataclass(kw_only=True)
class DevEvidence:
    """A family member's dev evidence (``candidate.dev``): what chose it."""

    metrics: Metrics
    detection: DetectionRecord | None = optional()  # a detector's evidence behind them
    verdict: VerdictRecord | None = optional()  # not the FP32 reference's
    n: int
    agreement_fp32: float | None = optional()
    split: str


@dataclass
class CandidateSignoff:
    """A family member's place in the sign-off: position, familywise and raw status, the
    persistent ledger's look and the alpha it tested at."""

    family_position: int
    status: str
    raw_status: str
    look: int | None = optional()
    look_id: str | None = optional()
    alpha_one_sided: float | None = optional()


@dataclass(kw_only=True)
class CandidateRecord:
    """One candidate's entry, in the order the run writes it: the evaluation's evidence
    (run/evaluation.py), its verdict, the artifact's facts (run/artifact.py), the per-layer
    comparison (run/stages/layerwise.py), the search's choices (``mixed``), the engine check,
    the sign-off (family members) and latency."""

    artifact: str | None = optional()  # fp32: the model file's name (schema 2 on)
    numerics: str
    eval_seconds: float | None = optional()
    n: int
    kernel_census: dict[str, int] | None = optional()
    backend: str | None = optional()
    metrics: Metrics
    detection: DetectionRecord | None = optional()  # a detector's evidence behind them
    output: EmbeddingOutput | None = optional()
    slices: dict[str, dict[str, SliceStat]] | None = optional()
    engine: EngineRecord | None = optional()
    agreement_fp32: float | None = optional()
    mean_kl_fp32: float | None = optional()
    mean_abs_logit_fp32: float | None = optional()
    split: str | None = optional()
    agreement_slices: dict[str, dict[str, AgreementStat]] | None = optional()
    embedding_fp32: EmbeddingRecord | None = optional()
    verdict: VerdictRecord | None = optional()
    plan_counts: dict[str, int] | None = optional()
    lint: Lint | None = optional()
    artifact_sha256: str | None = optional()
    ptq: list[StepRecord] | None = optional()
    layers: dict[str, LayerStats] | None = optional()
    flags: LayerFlags | None = inline()
    engine_layers: dict[str, JsonObject] | None = optional()
    calibrator: str | None = optional()
    fp16_layers: list[str] | None = optional()
    fp8_layers: list[str] | None = optional()
    plan_reasons: dict[str, str] | None = optional()
    backend_check: BackendCheckRecord | None = optional()
    dev: DevEvidence | None = optional()
    signoff: CandidateSignoff | None = optional()
    latency: dict[str, LatencyStats] | None = optional()

    def slice_stat(self, slice_name: str, value: str) -> SliceStat | None:
        """The recorded accuracy and n of slice ``slice_name`` = ``value`` (None: none)."""
        return (self.slices or {}).get(slice_name, {}).get(value)

    def agreement_stat(self, slice_name: str, value: str) -> AgreementStat | None:
        """Agreement with FP32 on slice ``slice_name`` = ``value`` (None: not recorded)."""
        return (self.agreement_slices or {}).get(slice_name, {}).get(value)

    def layer_sqnr(self, tensor: str) -> float | None:
        """SQNR (dB) of ``tensor`` vs FP32, None when not compared."""
        stats = (self.layers or {}).get(tensor)
        return stats.sqnr_db if stats is not None else None

    @property
    def flagged_layers(self) -> list[FlaggedLayer]:
        return self.flags.flagged_layers if self.flags is not None else []

    @property
    def first_diverging(self) -> str | None:
        return self.flags.first_diverging if self.flags is not None else None

    @property
    def first_diverging_node(self) -> str | None:
        return self.flags.first_diverging_node if self.flags is not None else None
