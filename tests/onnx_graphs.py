"""Small image CNNs built in code, shared by the image-run tests (test_app_images.py,
run/test_ptq_restore.py, run/test_run_scope.py): one input ``input`` [batch, 3, 16, 16], one
output ``logits`` [batch, 2]. Importable from every test folder: tests/ is on sys.path
(tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save_cnn(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], path: Path,
             name: str, *, batch: str | int = "batch") -> None:
    """Save the checked opset-17 model of ``nodes`` with these initializers (in this order) at
    ``path``: graph ``name``, input ``input`` FLOAT [batch, 3, 16, 16], output ``logits``
    FLOAT [batch, 2] (``batch``: a fixed batch size, or a symbolic name)."""
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 2])],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def cnn_run_context(root: Path, model_path: Path, name: str, *overrides: str):
    """A prepared RunContext of the CNN at ``model_path`` on a fresh 16 x 16 two-class image
    folder under ``root`` (no stage cache), with the ptq ``overrides``."""
    import quantkit
    from quantkit.app import prepared_context
    from test_app_images import image_folder

    image_folder(root / "images")
    base = ["model=onnx", f"model.path={model_path}", "data=image_folder",
            f"data.path={root / 'images'}", "data.image.size=16", "data.test_fraction=0.5",
            "data.calib.num_samples=16", f"cache_dir={root / 'cache'}", "progress=false",
            "stage_cache=false", f"experiment_name={name}"]
    return prepared_context(quantkit.configure([*base, *overrides]), root / "run")
