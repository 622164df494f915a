"""Engine registry: heavy imports (torch, transformers, vllm) happen only for the engine asked for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from presto.engines.base import CallStats, Engine, SuffixRequest, SuffixResult

ENGINES = ("toy", "hf", "vllm")
ENGINE_KEYS = {"toy": ("name", "table"), "hf": ("name", "dtype", "threads", "device")}
"""The keys each engine reads from its config group (an unknown one is refused, not ignored)."""


def build_engine(engine_cfg: Mapping[str, Any], model_cfg: Mapping[str, Any] | None = None) -> Engine:
    """Instantiate the engine named by ``engine_cfg['name']``."""
    name = engine_cfg["name"]
    if name in ENGINE_KEYS:  # vLLM checks its own (many) settings
        from presto.config import check_keys

        # e.g. +engine.device=cuda on hf: the engine would run on the CPU without a word
        check_keys(dict(engine_cfg), "engine", f"engine={name}", ENGINE_KEYS[name])
    if name == "toy":
        from presto.engines.toy import ToyEngine

        return ToyEngine(engine_cfg["table"])
    if name == "hf":
        from presto.engines.hf import HFEngine
        from presto.models import resolve_model_dir

        model_dir = resolve_model_dir(str(model_cfg["path"]), model_cfg.get("cache_dir"))
        return HFEngine(
            model_dir,
            dtype=engine_cfg.get("dtype", "float32"),
            threads=engine_cfg.get("threads"),
            device=engine_cfg.get("device", "cpu"),
        )
    if name == "vllm":
        from presto.engines.vllm import VLLMEngine
        from presto.models import resolve_model_dir

        model_dir = resolve_model_dir(str(model_cfg["path"]), model_cfg.get("cache_dir"))
        return VLLMEngine(model_dir, **{k: v for k, v in engine_cfg.items() if k != "name"})
    raise ValueError(f"engine={name} is not an engine; choose one of: {', '.join(ENGINES)}")


__all__ = ["ENGINES", "ENGINE_KEYS", "CallStats", "Engine", "SuffixRequest", "SuffixResult", "build_engine"]
