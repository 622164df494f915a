"""What a predictor checkpoint was trained on, and how a run differs from it.

A checkpoint trained by this version carries a hyperparameter ``provenance``: the training
trees' ``samplers``, ``composition`` (runs and nodes per sampler and traversal) and
``sampler_settings`` (each distinct sampler section of their runs' config.yaml, less
``steps``), as metrics.json reports them. The paper trains one predictor per setting; a
predictive run whose sampler or setting is not among these is served all the same (every
sampler logs every feature) but warned (:func:`provenance_mismatch`). Older checkpoints have
no provenance and are never found to differ, nor is a malformed one: provenance only
informs, it never stops serving.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def parse_provenance(value: Any) -> dict[str, Any] | None:
    """A checkpoint's ``provenance`` hyperparameter if it has the shape training writes, else None
    (absent: a checkpoint of an older trainer; malformed: not trusted, and not worth refusing the model)."""
    if not isinstance(value, dict):
        return None
    samplers = value.get("samplers")
    composition = value.get("composition", [])
    settings = value.get("sampler_settings", [])
    if not isinstance(samplers, list) or not all(isinstance(name, str) for name in samplers):
        return None
    for parts in (composition, settings):
        if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
            return None
    return {"samplers": list(samplers), "composition": list(composition), "sampler_settings": list(settings)}


UNKNOWN_SAMPLER = "unknown"
"""The sampler training records for runs whose directory names none."""

NOT_DECISIVE = ("name", "steps", "runs")
"""Keys of a sampler setting that do not change an MH decision's acceptance: K sets how long a
chain runs (training drops it too), ``runs`` counts the runs of a setting."""


def sampler_setting(sampler: Any) -> dict[str, Any]:
    """A run's sampler as training records a setting: presto.config.SamplerSettings (its shared
    keys and sampler-specific options) or a mapping of the sampler section's keys."""
    if isinstance(sampler, Mapping):
        return dict(sampler)
    shared = ("name", "alpha", "tau", "max_new_tokens", "block_size", "steps")
    return {**{key: getattr(sampler, key) for key in shared}, **dict(getattr(sampler, "options", {}) or {})}


def tau_as_meant(section: Mapping[str, Any]) -> dict[str, Any]:
    """A sampler section (or setting) with ``tau: null`` as the temperature it stands for, 1/alpha
    (when alpha is a number > 0), so that sampler.tau=0.25 at alpha 4 and the default are one setting."""
    section = dict(section)
    alpha = section.get("alpha")
    if "tau" not in section or section["tau"] is not None or not _is_number(alpha) or not alpha > 0:
        return section
    try:
        tau = 1.0 / alpha
    except OverflowError:  # an int beyond floats
        return section
    if math.isfinite(tau):
        section["tau"] = tau
    return section


def _decisive(setting: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a setting that decide acceptance, tau=null as what it means (:func:`tau_as_meant`)."""
    return tau_as_meant({key: value for key, value in setting.items() if key not in NOT_DECISIVE})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """Equal values, numbers up to rounding (alpha=4 and 4.0, tau 0.25 and 1/4), lists element-wise."""
    if _is_number(a) and _is_number(b):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _count(value: Any) -> int:
    """A recorded number of runs; 0 for anything else (a hand-edited file must not stop a run)."""
    return int(value) if _is_number(value) and math.isfinite(value) else 0


def _shown(value: Any) -> str:
    if _is_number(value):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)


def provenance_mismatch(provenance: Mapping[str, Any] | None, sampler: Any) -> str | None:
    """How a run's sampler differs from a predictor's training data, or None when it does not.

    ``provenance``: a :class:`Predictor`'s (None: not recorded, never a mismatch); ``sampler``:
    the run's (see :func:`sampler_setting`). A mismatch is a sampler that no training run used,
    or, when every training run of the run's sampler recorded its setting, a setting none of
    them had on the keys that decide acceptance (all of the sampler section but ``steps``;
    tau=null is 1/alpha): the keys of the nearest setting that differ are named, with the
    values training had and the run's. Runs whose sampler or setting was not recorded may have
    been the run's: they never make a mismatch.
    """
    if not provenance:
        return None
    run = sampler_setting(sampler)
    name = str(run.get("name"))
    samplers = list(provenance.get("samplers") or [])
    if not samplers or (UNKNOWN_SAMPLER in samplers and name not in samplers):
        return None
    if name not in samplers:
        return f"trained on {', '.join(samplers)} trees, while this run samples with {name}"
    settings = [s for s in provenance.get("sampler_settings") or [] if s.get("name") == name]
    parts = [part for part in provenance.get("composition") or [] if part.get("sampler") == name]
    runs = sum(_count(part.get("runs")) for part in parts)
    recorded = sum(_count(s.get("runs")) for s in settings)
    if not settings or recorded < runs:
        return None
    wanted = _decisive(run)
    trained = [_decisive(s) for s in settings]
    differences = [sorted(k for k in wanted.keys() & t.keys() if not _same(wanted[k], t[k])) for t in trained]
    nearest = min(differences, key=len)
    if not nearest:
        return None
    named = []
    for key in nearest:
        values: list[Any] = []
        for t in trained:
            if key in t and not any(_same(t[key], v) for v in values):
                values.append(t[key])
        named.append(f"sampler.{key} (trained {', '.join(map(_shown, values))}, this run {_shown(wanted[key])})")
    return f"trained on {name} trees of another setting: {', '.join(named)}"
