"""Makes the graph builders in qdq_graphs.py importable in every pytest import mode, with
pytest's assert messages in its helpers (qdq_pair_into asserts what it finds)."""

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
pytest.register_assert_rewrite("qdq_graphs")
