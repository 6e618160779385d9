"""What ONNX Runtime really ran a session on, compared with what the run asked for.

ONNX Runtime catches an execution provider's initialisation failure (TensorRT or CUDA
libraries missing or of the wrong version, no GPU), prints a notice to stdout and rebuilds the
session on the remaining providers: the provider options and ``disabled_optimizers`` of the
request are gone, so e.g. ``WeightBiasQuantization`` runs again on FP16 Q/DQ graphs. A run on
``backend=ort_trt`` / ``ort_cuda`` would then report CPU numbers as GPU ones.
:func:`check_session_providers` turns that into one clear error.

Which TensorRT the TensorRT execution provider needs: ``onnxruntime-gpu`` packages from 1.18 on
link TensorRT 10 (``libnvinfer.so.10``; ONNX Runtime's requirements table: 1.22 is built with
TensorRT 10.9 and CUDA 12.x), and from 1.22 only CUDA 12 packages are released. TensorRT 11
does not satisfy them; quantkit's own ``backend=trt`` takes 10.x and 11.x.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from quantkit.errors import BackendError

log = logging.getLogger(__name__)

#: The TensorRT major the TensorRT execution provider of onnxruntime-gpu (>= 1.18) links.
ORT_TRT_EP_TENSORRT_MAJOR = 10

_FALLBACK_FIX = {
    "TensorrtExecutionProvider": (
        "the onnxruntime-gpu TensorRT provider needs TensorRT "
        f"{ORT_TRT_EP_TENSORRT_MAJOR}.x libraries for CUDA 12 (pip install "
        f"'tensorrt-cu12-libs=={ORT_TRT_EP_TENSORRT_MAJOR}.*', or a TensorRT "
        f"{ORT_TRT_EP_TENSORRT_MAJOR} tar with its lib directory on LD_LIBRARY_PATH), CUDA 12 and "
        "cuDNN 9 on a machine with an NVIDIA GPU; TensorRT 11 does not load. Or use backend=trt "
        "(quantkit's own engines, TensorRT 10 or 11)"),
    "CUDAExecutionProvider": (
        "the onnxruntime-gpu CUDA provider needs the CUDA 12 and cuDNN 9 libraries (on "
        "LD_LIBRARY_PATH or as the nvidia-*-cu12 pip wheels) and a visible NVIDIA GPU "
        "(nvidia-smi); or use backend=ort on the CPU"),
}


def _names(requested: Sequence) -> list[str]:
    return [p[0] if isinstance(p, (tuple, list)) else str(p) for p in requested]


def check_session_providers(session, requested: Sequence,
                            provider_options: Mapping[str, Mapping[str, object]] | None = None,
                            *, where: str = "backend.providers") -> list[str]:
    """The session's providers, after checking ONNX Runtime did not silently fall back.

    ``requested``: provider names (or ``(name, options)`` pairs) as passed to the session.
    A requested provider missing from ``session.get_providers()`` raises ``BackendError``
    naming it, what the session runs on and the fix. A provider option the session reports
    with another value than requested (providers that report their options: CUDA, TensorRT)
    is logged as a warning. CPU-only requests pass unchanged.
    """
    names = _names(requested)
    got = list(session.get_providers())
    dropped = [p for p in names if p not in got]
    if dropped:
        p = dropped[0]
        fix = _FALLBACK_FIX.get(p, f"install what {p} needs, or remove it from {where}")
        raise BackendError(
            f"ONNX Runtime could not initialise {p} and fell back to {', '.join(got)} "
            "(dropping the provider options and disabled optimizers of the request)",
            where=where, value=names, fix=fix)
    options = {p: dict(o) for p, o in (provider_options or {}).items()}
    for item in requested:
        if isinstance(item, (tuple, list)) and len(item) == 2:
            options.setdefault(str(item[0]), dict(item[1]))
    reported = session.get_provider_options() if options else {}
    for p, opts in options.items():
        have = reported.get(p) or {}
        for key, want in opts.items():
            if key in have and _norm(have[key]) != _norm(want):
                # not fatal: providers may report an option in another spelling
                log.warning("ONNX Runtime reports %s option %s=%s, requested %s (%s)", p, key,
                            have[key], want, where)
    return got


def _norm(value: object) -> str:
    text = str(value).strip()
    low = text.lower()
    if low in ("true", "1"):
        return "1"
    if low in ("false", "0"):
        return "0"
    return text
