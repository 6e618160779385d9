"""Rankings whose ties do not depend on float noise.

A dev ranking (the best INT8 calibrator for the sign-off family; the layer ranking of the
precision search) must come out the same on every host. The numbers it ranks come from ONNX
Runtime kernels that differ by CPU (AVX2, AVX512-VNNI, AMX) in their last bits: relative
~1e-6 on a logit, more on a derived score (KL of two nearby distributions moves by
2 x the relative change of their difference, ~1e-3 for an INT8 candidate). A sort on the raw
floats turns such differences into another order. Here values closer than a stated
``tolerance`` are *tied*, and ties go to a fixed order (the candidates' or nodes' own
order: the calibrator list, the graph), never to the float noise:

* :func:`best_with_ties`: the best value; every candidate within ``tolerance`` of it is
  tied with it; the earliest of them in ``order`` wins.
* :func:`rank_with_ties`: single-linkage groups of the sorted values (neighbours closer
  than ``tolerance`` share a group), groups by their best value, each group in ``order``.

Discretizing a continuum always leaves a boundary: two values can sit a tolerance apart on
one host and a hair less on another. The probability of that is about (host noise) /
(tolerance) per near pair, so the tolerances are chosen well above the noise
(:data:`DEV_TIE_SHARE`, :data:`RANK_TIE_SHARE`).

Pure; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from quantkit.errors import ConfigError

__all__ = ["DEV_TIE_SHARE", "RANK_TIE_SHARE", "best_with_ties", "rank_with_ties"]

#: dev choices: values within this share of the best candidate's dev interval width are
#: tied. 5% of a 95% interval's width is ~0.1 standard error: a difference no test could
#: tell from zero, and (bert_int8 dev: width ~0.02 accuracy) ~3 dev examples, above the
#: 0-2 predictions that flip between CPU kernels
DEV_TIE_SHARE = 0.05
#: layer rankings: scores within this share of the largest score are tied (the layers
#: whose damage is below 0.1% of the worst layer's keep graph order)
RANK_TIE_SHARE = 1e-3


def _finite(values: Mapping[str, float], where: str) -> dict[str, float]:
    out = {}
    for k, v in values.items():
        f = float(v)
        if math.isnan(f):
            raise ConfigError("a ranked value is NaN", where=where, value=k,
                              fix="rank only candidates with a measured value")
        out[k] = f
    return out


def _positions(order: Sequence[str], keys) -> dict[str, int]:
    pos = {n: i for i, n in enumerate(order)}
    missing = [k for k in keys if k not in pos]
    if missing:
        raise ConfigError("a ranked name is missing from the fixed order", where="ties(order)",
                          value=missing[0], fix="pass every ranked name in order")
    return pos


def best_with_ties(values: Mapping[str, float], *, order: Sequence[str],
                   tolerance: float) -> str:
    """The name with the largest value; names within ``tolerance`` (>= 0) of it are tied
    with it and the earliest in ``order`` wins."""
    if not values:
        raise ConfigError("nothing to rank", where="best_with_ties", value=0,
                          fix="pass at least one value")
    v = _finite(values, "best_with_ties")
    pos = _positions(order, v)
    top = max(v.values())
    tied = [k for k in v if v[k] >= top - max(0.0, tolerance)]
    return min(tied, key=pos.__getitem__)


def rank_with_ties(values: Mapping[str, float], *, order: Sequence[str],
                   tolerance: float) -> list[str]:
    """Names by value, largest first; neighbours (in sorted order) closer than
    ``tolerance`` share a group, groups go by their largest value, names inside a group by
    ``order``."""
    v = _finite(values, "rank_with_ties")
    pos = _positions(order, v)
    by_value = sorted(v, key=lambda k: (-v[k], pos[k]))
    groups: list[list[str]] = []
    for k in by_value:
        if groups and v[groups[-1][-1]] - v[k] <= max(0.0, tolerance):
            groups[-1].append(k)
        else:
            groups.append([k])
    return [k for g in groups for k in sorted(g, key=pos.__getitem__)]
