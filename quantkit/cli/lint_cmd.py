"""``quantkit lint model.onnx [--json]`` (or ``python -m quantkit.cli.lint_cmd``): check a Q/DQ model against TensorRT's rules.

Prints one violation per line (``RULE node_name: message``) or a JSON list with ``--json``.
Exit status: 0 clean, 1 violations found, 2 the model could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _load(path: Path):
    import onnx

    from quantkit.errors import ModelError, first_line

    if not path.is_file():
        raise OSError(f"no such file: {path}")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf / onnx raise several unrelated types
        raise OSError(f"not a readable ONNX model: {path} ({type(exc).__name__}: "
                      f"{first_line(exc)})") from exc
    if not model.graph.node or not model.opset_import:
        raise OSError(f"not an ONNX model (no graph nodes or opset): {path}")
    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:  # onnx.checker.ValidationError and friends
        raise OSError(f"invalid ONNX model: {path}: {first_line(exc)}") from exc
    from quantkit.models.model import check_tensor_types

    try:
        check_tensor_types(model, where=str(path))
    except ModelError as exc:
        raise OSError(f"invalid ONNX model: {exc}") from exc
    return model


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="quantkit lint",
        description="Check a Q/DQ ONNX model against TensorRT's INT8 placement rules. "
                    "Exit 0 clean, 1 violations, 2 unreadable model.")
    parser.add_argument("model", type=Path, help="path to the .onnx file")
    parser.add_argument("--json", action="store_true", help="print violations as a JSON list")
    parser.add_argument("--nonfinite", default="", metavar="T1,T2",
                        help="comma-separated tensors known to carry inf/nan")
    parser.add_argument("--concat-range-ratio", type=float, default=None, metavar="R",
                        help="widest / narrowest input range a Concat may quantize under one "
                             "scale (rule concat-shared-scale; default 16, as "
                             "precision.concat_range_ratio); ranges come from the scales of "
                             "the DQs feeding the Concat")
    args = parser.parse_args(argv)
    try:
        model = _load(args.model)
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from quantkit.errors import ConfigError
    from quantkit.graph.mixed_concat import DEFAULT_CONCAT_RANGE_RATIO, check_concat_range_ratio
    from quantkit.qdq.lint import lint_qdq

    ratio = DEFAULT_CONCAT_RANGE_RATIO if args.concat_range_ratio is None \
        else args.concat_range_ratio
    try:
        ratio = check_concat_range_ratio(ratio, where="--concat-range-ratio")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    nonfinite = {t for t in args.nonfinite.split(",") if t}
    violations = lint_qdq(model, nonfinite_tensors=nonfinite, concat_range_ratio=ratio)
    if args.json:
        print(json.dumps([v.to_dict() for v in violations], indent=2))
    else:
        for v in violations:
            print(v)
        if not violations:
            print(f"{args.model}: clean (no Q/DQ rule violations)", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
