"""validate(): every group's checks in their fixed order, and the checks across groups."""

from __future__ import annotations

from quantkit.errors import ConfigError
from quantkit.graph.mixed_concat import check_concat_range_ratio
from quantkit.settings.backend_schema import validate_provider_options
from quantkit.settings.bench_schema import validate_bench
from quantkit.settings.calibrator_schema import validate_calibrator
from quantkit.settings.compare_schema import validate_compare
from quantkit.settings.data_schema import validate_data, validate_image
from quantkit.settings.model_schema import validate_model
from quantkit.settings.ptq_schema import validate_ptq
from quantkit.settings.report_schema import validate_report
from quantkit.settings.settings_schema import Settings
from quantkit.settings.value_checks import _choice, _positive, check_plain_name
from quantkit.settings.verdict_schema import MAP_METRICS, validate_verdict


def validate(s: Settings) -> Settings:
    """Range checks that types cannot express. Raises ConfigError (one line)."""
    check_plain_name("experiment_name", s.experiment_name)
    validate_model(s.model)
    _choice("data.source", s.data.source, ("embedded", "local", "hub"))
    _choice("data.kind", s.data.kind, ("text", "image", "detection"))
    check_detection_pairing(s)
    if s.data.kind == "image":
        validate_image(s.data.image)
        if s.model.kind == "hub":
            raise ConfigError("model=hub exports text encoders; it cannot take image data",
                              where="model.kind", value="hub",
                              fix="use model=mobilenet_fashion or model=onnx with data.kind=image")
        _positive("model.head.n_train", s.model.head.n_train, allow_none=True)
    elif s.model.head.n_train is not None:
        raise ConfigError("model.head.n_train applies to image zoo models only",
                          where="model.head.n_train", value=s.model.head.n_train,
                          fix="remove it; for text models set data.train.size")
    validate_data(s.data)
    validate_calibrator(s.calibrator)
    _choice("precision.remainder", s.precision.remainder, ("fp16", "fp32"))
    check_concat_range_ratio(s.precision.concat_range_ratio, where="precision.concat_range_ratio")
    for pattern, prec in s.precision.force.items():
        _choice(f"precision.force[{pattern}]", prec, ("int8", "fp16", "fp32"))
    _positive("precision.search.max_full_evals", s.precision.search.max_full_evals, allow_zero=True)
    _positive("precision.search.subset", s.precision.search.subset)
    _positive("precision.search.measure_top", s.precision.search.measure_top, allow_zero=True)
    _choice("precision.search.measure_mode", s.precision.search.measure_mode, ("only", "restore"))
    _positive("precision.search.max_minutes", s.precision.search.max_minutes, allow_zero=True)
    _choice("backend.name", s.backend.name, ("ort", "trt"))
    _choice("precision.qdq_scale_dtype", s.precision.qdq_scale_dtype, ("fp32", "fp16"))
    from quantkit.settings.precision_schema import FP8_WEIGHT_ROUNDING

    _choice("precision.fp8_weight_rounding", s.precision.fp8_weight_rounding,
            FP8_WEIGHT_ROUNDING)
    if s.precision.qdq_scale_dtype == "fp16" and s.precision.remainder != "fp16":
        raise ConfigError("FP16 Q/DQ scales need an FP16 remainder",
                          where="precision.qdq_scale_dtype", value="fp16",
                          fix="set precision.remainder=fp16 (not with target=ort_cpu), or keep "
                              "precision.qdq_scale_dtype=fp32")
    _choice("backend.qdq_mode", s.backend.qdq_mode, ("auto", "exact", "fused", "integer"))
    _choice("target", s.target, ("tensorrt", "ort_cpu"))
    from quantkit.precision.gpus import check_formats

    check_formats(s.gpu.sm, s.precision.formats)
    if "fp8" in s.precision.formats and s.target != "tensorrt":
        raise ConfigError("format fp8 is written for TensorRT only", where="precision.formats",
                          value=s.target, fix="use target=tensorrt, or precision.formats=[int8]")
    if "fp8" in s.precision.formats:
        from quantkit.calibrate.calibrators import FP8_CALIBRATORS

        if not any(m in FP8_CALIBRATORS for m in s.calibrator.methods):
            raise ConfigError("format fp8 requested, but no calibrator in calibrator.methods has "
                              "an FP8 form", where="calibrator.methods",
                              value=list(s.calibrator.methods),
                              fix=f"add one of {sorted(FP8_CALIBRATORS)} (e.g. "
                                  "calibrator.methods=[minmax,entropy])")
    if s.target == "ort_cpu" and s.backend.name == "trt":
        raise ConfigError("target=ort_cpu artifacts are for ONNX Runtime, not TensorRT",
                          where="target", value=s.target,
                          fix="use target=tensorrt with backend=trt, or backend=ort")
    _positive("backend.batch_size", s.backend.batch_size)
    validate_compare(s.compare)
    validate_verdict(s.verdict)
    validate_report(s.report)
    validate_provider_options(s.backend)
    validate_bench(s.bench)
    validate_ptq(s.ptq)
    if s.backend.name == "trt":
        validate_trt_shapes(s)
    return s


def check_detection_pairing(s: Settings) -> None:
    """A detector's outputs (model.output.kind=detection) are read with detection data
    (images with box labels, or none), and detection data only by a detector; the detection
    metrics are signed off on a detector only."""
    det_model, det_data = s.model.output.kind == "detection", s.data.kind == "detection"
    if det_model and not det_data:
        raise ConfigError("model.output.kind=detection reads detections, and data.kind is "
                          f"{s.data.kind}", where="data.kind", value=s.data.kind,
                          fix="use data=detection_folder data.path=<images> [data.labels="
                              "<COCO JSON | YOLO folder>], or data=layout_pages")
    if det_data and not det_model:
        raise ConfigError("detection data (box labels) needs a detector's outputs",
                          where="model.output.kind", value=s.model.output.kind,
                          fix="add model.output.kind=detection model.output.decoder=<yolov8 | "
                              "yolov5 | gfl | nms>")
    if s.verdict.metric in MAP_METRICS and not det_model:
        raise ConfigError(f"verdict.metric={s.verdict.metric} is a detector's metric",
                          where="verdict.metric", value=s.verdict.metric,
                          fix="use model.output.kind=detection, or verdict.metric=accuracy | "
                              "agreement | kl | cosine for other outputs")
    if det_model and s.target == "ort_cpu":
        raise ConfigError("the engine check of detection outputs on ONNX Runtime CPU's fused "
                          "kernels (target=ort_cpu) is not implemented", where="target",
                          value=s.target, fix="use target=tensorrt (the default) for a detector")


def validate_trt_shapes(s: Settings) -> None:
    """backend=trt: every batch size the run feeds (backend.batch_size, bench.batch_sizes) and
    the text length (data.max_length) must fit the engine profile ranges of ``backend.trt``,
    one clear error before any work. Inputs with ``shape_overrides`` are checked against the
    model when the engine is built (quantkit.backends.trt.check_profiles_cover)."""
    t = s.backend.trt
    if t.shape_overrides:
        return
    renamed = bool(t.dim_overrides)  # a dim override may set the batch or sequence range
    sizes = [("backend.batch_size", s.backend.batch_size)]
    if s.bench.enabled:
        sizes += [(f"bench.batch_sizes[{i}]", b) for i, b in enumerate(s.bench.batch_sizes)]
    if not renamed:
        for key, b in sizes:
            if not t.min_batch <= b <= t.max_batch:
                raise ConfigError(f"{key}={b} does not fit the TensorRT engine's batch range "
                                  f"{t.min_batch}..{t.max_batch}", where="backend.trt.max_batch",
                                  value=b, fix=f"set backend.trt.min_batch <= {b} <= "
                                               f"backend.trt.max_batch, or change {key}")
    if (s.data.kind == "text" and t.max_sequence is not None and not renamed
            and s.data.max_length > t.max_sequence):
        raise ConfigError(f"data.max_length={s.data.max_length} does not fit the TensorRT "
                          f"engine's sequence range {t.min_sequence}..{t.max_sequence}",
                          where="backend.trt.max_sequence", value=s.data.max_length,
                          fix=f"set backend.trt.max_sequence >= {s.data.max_length} (and "
                              "opt_sequence), or lower data.max_length")
