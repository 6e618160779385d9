"""What a run records about itself before any stage: the config as it ran (what the deployment
target forced written in) and one line on the deployment target."""

from __future__ import annotations

from omegaconf import OmegaConf

from quantkit.ledger_dialect import mask_secrets
from quantkit.precision.gpus import formats_for, resolve_gpu
from quantkit.qdq.targets import get_target
from quantkit.settings import target_overrides

__all__ = ["recorded_config", "target_note"]


def recorded_config(cfg, settings) -> dict:
    """The composed config as it ran: what the deployment target forced is written in
    (``target=ort_cpu`` records ``precision.remainder: fp32``); a team ledger's URL with its
    password masked."""
    config = OmegaConf.to_container(cfg, resolve=True)
    verdict = config.get("verdict")
    if isinstance(verdict, dict):
        for key in ("ledger", "ledger_path"):
            if isinstance(verdict.get(key), str):
                verdict[key] = mask_secrets(verdict[key])
    for dotted, value in target_overrides(settings).items():
        node = config
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return config


def target_note(settings) -> str:
    """One line for the record: which deployment target the INT8 artifacts realize."""
    t = get_target(settings.target)
    note = f"target {t.name}: {t.description}"
    if t.forced_remainder:
        note += f"; precision.remainder forced to {t.forced_remainder}"
    if t.name == "ort_cpu":
        note += ("; every number of this run is on ONNX Runtime CPU, target ort_cpu, and "
                 "says nothing about TensorRT")
    gpu = getattr(getattr(settings, "gpu", None), "sm", None)
    if gpu is not None:  # unset: the note reads as before this setting existed
        g = resolve_gpu(gpu)
        note += (f"; target GPU {g.label}, {g.arch}: formats it runs {', '.join(formats_for(g))}"
                 f", requested {', '.join(settings.precision.formats)}")
    return note
