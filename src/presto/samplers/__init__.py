"""Sampler registry: kernels keyed by ``sampler.name``.

Kernel constructors validate their own options (``settings.options``: the sampler-specific
YAML keys) and raise :class:`presto.config.ConfigError` with one line naming the key, so
``build_kernel`` doubles as the sampler-option check and is cheap enough to call early.
"""

from __future__ import annotations

from presto.config import SamplerSettings, check_keys
from presto.samplers.kernel import Kernel

# Each kernel's own YAML keys besides the shared ones (alpha, tau, n, B, K).
KERNEL_KEYS = {"powermh": (), "entropycut": ("beta", "uniform_mix"), "multitry": ("num_candidates", "temperatures")}


def build_kernel(settings: SamplerSettings) -> Kernel:
    """The kernel of ``settings.name``; options missing from the YAML take the paper's defaults."""
    options = settings.options
    check_keys(options, "sampler", f"sampler={settings.name}", KERNEL_KEYS.get(settings.name, ()))
    if settings.name == "powermh":
        from presto.samplers.powermh import PowerMH

        return PowerMH(settings.alpha, settings.tau)
    if settings.name == "entropycut":
        from presto.samplers.entropycut import DEFAULT_BETA, DEFAULT_UNIFORM_MIX, EntropyCut

        return EntropyCut(
            settings.alpha,
            settings.tau,
            beta=options.get("beta", DEFAULT_BETA),
            uniform_mix=options.get("uniform_mix", DEFAULT_UNIFORM_MIX),
        )
    if settings.name == "multitry":
        from presto.samplers.multitry import DEFAULT_NUM_CANDIDATES, DEFAULT_TEMPERATURES, MultiTryMH

        return MultiTryMH(
            settings.alpha,
            settings.tau,
            num_candidates=options.get("num_candidates", DEFAULT_NUM_CANDIDATES),
            temperatures=options.get("temperatures", DEFAULT_TEMPERATURES),
        )
    raise ValueError(f"sampler={settings.name} is not implemented yet")
