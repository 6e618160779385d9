"""What every TensorRT object shares: the process logger, plugin registration, the network
creation flags and the text of TensorRT's errors. Functions take the ``tensorrt`` module (from
``require_tensorrt``), so nothing here imports it."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from quantkit.backends.trt.availability import MIN_TENSORRT_MAJOR, tensorrt_major
from quantkit.errors import BackendUnavailable

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _logger_class(trt):
    class _Logger(trt.ILogger):
        """Routes TensorRT messages to ``logging`` and keeps the errors for our exceptions."""

        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity, msg) -> None:  # called by TensorRT
            if severity in (trt.ILogger.INTERNAL_ERROR, trt.ILogger.ERROR):
                self.errors.append(str(msg))
                log.error("TensorRT: %s", msg)
            elif severity == trt.ILogger.WARNING:
                log.warning("TensorRT: %s", msg)
            elif severity == trt.ILogger.INFO:
                log.info("TensorRT: %s", msg)

        def take_errors(self) -> list[str]:
            errors, self.errors = self.errors, []
            return errors

    return _Logger


@functools.lru_cache(maxsize=1)
def trt_logger(trt):
    """One logger for the process: it must outlive every builder, runtime and engine made with it."""
    return _logger_class(trt)()


@functools.lru_cache(maxsize=1)
def init_plugins(trt) -> None:
    """Register TensorRT's bundled plugins once (the ONNX parser maps some ops onto them)."""
    init = getattr(trt, "init_libnvinfer_plugins", None)  # absent from lean/dispatch builds
    if init is None:
        log.debug("tensorrt %s has no init_libnvinfer_plugins; plugins not registered",
                  trt.__version__)
    elif not init(trt_logger(trt), ""):
        log.warning("TensorRT's plugin library could not be initialised; ops that need a "
                    "plugin will fail to parse")


def errors_text(errors: Sequence[str], default: str) -> str:
    return " | ".join(e.strip() for e in errors if e.strip()) or default


def network_flags(trt) -> int:
    """STRONGLY_TYPED on TensorRT 10 (required); nothing on 11+ (always strongly typed)."""
    if tensorrt_major(trt.__version__) >= 11:
        return 0
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if flag is None:
        raise BackendUnavailable(f"tensorrt {trt.__version__} has no STRONGLY_TYPED network flag",
                                 fix=f"pip install -U 'tensorrt-cu12>={MIN_TENSORRT_MAJOR}'")
    return 1 << int(flag)


def parser_error_text(err) -> str:
    try:
        node_name, op, desc = err.node_name(), err.node_operator(), err.desc()
    except AttributeError:  # older bindings without node_name()/node_operator()
        return str(err).strip()
    where = f"node {node_name!r} ({op})" if node_name else f"node #{err.node()}"
    return f"{where}: {desc}"
