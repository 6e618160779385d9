"""Typed settings: dataclass schemas registered in Hydra's ConfigStore, validated once.

``conf/config.yaml`` lists ``base_config`` (:class:`Settings`) first, so Hydra type-checks
every override while composing. :func:`build` turns the composed DictConfig into plain
frozen-ish dataclasses and checks ranges that types cannot express; every problem becomes
one :class:`~quantkit.errors.ConfigError` line naming the key, the value and the fix.

One schema module per config group (``<group>_schema.py``, as ``conf/`` has one folder per
group): the group's dataclasses and the checks of that group alone. ``settings_schema``
holds :class:`Settings`, ``cross_checks`` :func:`validate` (every check, in one fixed order,
and those across groups), ``loading`` :func:`build`, ``value_checks`` the shared checks.
"""

from quantkit.settings.backend_schema import BackendConfig
from quantkit.settings.bench_schema import BenchConfig
from quantkit.settings.calibrator_schema import CALIBRATOR_NAMES, CalibratorConfig
from quantkit.settings.compare_schema import CompareConfig
from quantkit.settings.cross_checks import validate, validate_trt_shapes
from quantkit.settings.data_schema import (
    DEFAULT_TEST_FRACTION,
    CalibSplitConfig,
    DataConfig,
    DevSplitConfig,
    EvalSplitConfig,
    ImageConfig,
    TestSplitConfig,
    TrainSplitConfig,
    resolve_test_fraction,
    resolve_test_limit,
    validate_data_splits,
)
from quantkit.settings.gpu_schema import GpuConfig
from quantkit.settings.loading import apply_target, build, omegaconf_message, target_overrides
from quantkit.settings.model_schema import HeadConfig, InputsConfig, ModelConfig, OutputConfig
from quantkit.settings.precision_schema import PrecisionConfig, SearchConfig
from quantkit.settings.ptq_schema import PtqAutoConfig, PtqConfig, validate_ptq
from quantkit.settings.report_schema import ReportConfig
from quantkit.settings.settings_schema import Settings, register
from quantkit.settings.trt_schema import TRT_MIN_MAJOR, TrtConfig, check_trt_config
from quantkit.settings.value_checks import check_plain_name
from quantkit.settings.verdict_schema import (
    MAP_METRICS,
    VERDICT_METRICS,
    VerdictConfig,
    validate_ledger,
)

__all__ = [
    "BackendConfig", "BenchConfig", "CALIBRATOR_NAMES", "CalibSplitConfig", "CalibratorConfig",
    "CompareConfig", "DEFAULT_TEST_FRACTION", "DataConfig", "DevSplitConfig", "EvalSplitConfig",
    "GpuConfig", "HeadConfig", "ImageConfig", "InputsConfig", "MAP_METRICS", "ModelConfig",
    "OutputConfig",
    "PrecisionConfig", "PtqAutoConfig", "PtqConfig", "ReportConfig", "SearchConfig", "Settings",
    "TRT_MIN_MAJOR", "TestSplitConfig", "TrainSplitConfig", "TrtConfig", "VERDICT_METRICS",
    "VerdictConfig", "apply_target", "build", "check_plain_name", "check_trt_config",
    "omegaconf_message", "register", "resolve_test_fraction", "resolve_test_limit",
    "target_overrides", "validate", "validate_data_splits", "validate_ledger", "validate_ptq",
    "validate_trt_shapes",
]
