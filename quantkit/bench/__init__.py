"""quantkit.bench: latency and throughput of artifacts, on whatever backend runs them.

``timing`` times a runner (warm-up, then timed repeats within a budget), ``stats`` turns
latencies into percentiles, throughput and intervals, compares INT8 with FP16 and projects
the serving cost, ``stage`` is the run's latency stage.
"""

from quantkit.bench.stage import execution_label, measure_latency
from quantkit.bench.latency_stats import (compare_int8_fp16, cost_projection, latency_stats, median_ratio,
                                  paired_ratio)
from quantkit.bench.timing import Timing, time_runner

__all__ = ["Timing", "compare_int8_fp16", "cost_projection", "execution_label", "latency_stats",
           "measure_latency", "median_ratio", "paired_ratio", "time_runner"]
