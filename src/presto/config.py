"""Validation of a composed run config: one clear line per mistake, before anything loads.

Hydra composes the YAML; this module checks the values a user can get wrong and turns
them into small frozen records, so the rest of the code never sees a half-valid config.
Every message names the key and the allowed range, as vLLM's ``SamplingParams`` does.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

SAMPLERS = ("powermh", "entropycut", "multitry", "lowtemp", "best_of_n", "power_smc")
TRAVERSALS = ("sequential", "bfs", "predictive")
LOGGERS = ("none", "wandb")  # presto.runner.logging.build_logger


class ConfigError(ValueError):
    """A config value is out of range; the message is one line naming the key."""


@dataclass(frozen=True)
class SamplerSettings:
    name: str
    alpha: float
    tau: float
    max_new_tokens: int
    block_size: int
    steps: int
    options: dict[str, Any]  # sampler-specific keys (beta, uniform_mix, num_tries, ...)


@dataclass(frozen=True)
class RunSettings:
    seed: int
    sampler: SamplerSettings
    traversal: str
    traversal_options: dict[str, Any]  # rule-specific keys (predictor checkpoint, ...)
    n_pf: int
    chains_per_prompt: int
    num_prompts: int
    resume: bool
    max_logged_nodes: int
    progress: bool
    rescore: bool = False  # also rescore each final state under p0 (not a model call)
    shard: Shard | None = None  # dataset.shard: this job's share of the prompts


@dataclass(frozen=True)
class Shard:
    """``dataset.shard=I/N``: of the run's prompts, those at positions I, I + N, I + 2N, ...

    Strided rather than in blocks, so that every shard gets a mix of the dataset's problems
    (datasets are often ordered by difficulty or subject) and the shards' sizes differ by at
    most one. A chain's random inputs are keyed by its problem's row in the dataset, not by its
    position in a shard, so a shard's chains are exactly the whole run's chains of its prompts.
    """

    index: int
    count: int

    def select(self, problems: list) -> list:
        return problems[self.index :: self.count]

    def size(self, total: int) -> int:
        """How many of ``total`` prompts this shard holds."""
        return len(range(self.index, total, self.count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(value: Any) -> Shard | None:
    """``dataset.shard``: null (every prompt) or "I/N" with 0 <= I < N; anything else is one ConfigError line."""
    if value is None:
        return None
    index, slash, count = str(value).strip().partition("/")
    # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts.
    if not (slash and index.strip().isdecimal() and count.strip().isdecimal()):
        raise ConfigError(
            f"dataset.shard must be I/N (this job runs prompts I, I+N, I+2N, ...; 0 <= I < N), or null, got {value!r}"
        )
    shard = Shard(int(index), int(count))
    if shard.count < 1 or shard.index >= shard.count:
        raise ConfigError(f"dataset.shard={value} needs 0 <= I < N (shards are numbered from 0), got I={shard.index}")
    return shard


RUN_KEYS = ("chains_per_prompt", "resume", "max_logged_nodes", "progress", "rescore")
BUDGET_KEYS = ("n_pf",)


def check_keys(options: dict[str, Any], section: str, owner: str, allowed: tuple[str, ...]) -> None:
    """Refuse a key nobody reads (a typo such as ``+budget.npf=8`` would otherwise be ignored)."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(allowed) or "none besides the shared ones"
        raise ConfigError(f"{section}.{unknown[0]} is not a key of {owner}; its own keys: {known}")


CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
"""The project's Hydra configs: what the run config's own keys are read from (below)."""


@functools.cache
def run_config_keys(conf_dir: Path = CONF_DIR) -> tuple[str, ...]:
    """The top-level keys a run config may hold: conf/config.yaml's own (seed, run), each group of its
    defaults list (engine, model, ...; a group's keys sit under its name), and the keys the options
    of a ``# @package _global_`` group (experiment, launcher) set at the top. Empty where the
    configs are not beside this package (nothing is then checked)."""
    if not (conf_dir / "config.yaml").is_file():
        return ()
    primary = OmegaConf.load(conf_dir / "config.yaml")
    keys = {str(k) for k in primary if k not in ("defaults", "hydra")}
    for entry in primary.get("defaults", []):
        groups = entry.keys() if isinstance(entry, Mapping) else ()  # not _self_
        for group in (str(g) for g in groups if (conf_dir / str(g)).is_dir()):  # not "override hydra/..."
            for option in (conf_dir / group).glob("*.yaml"):
                if _global_package(option):
                    keys |= {str(k) for k in OmegaConf.load(option) if k not in ("defaults", "hydra")}
                else:
                    keys.add(group)
    return tuple(sorted(keys))


def _global_package(option: Path) -> bool:
    """Whether a config file's header (its leading comment lines) puts it in Hydra's ``_global_`` package."""
    for line in option.read_text().splitlines():
        if not line.startswith("#"):
            return False
        if line.lstrip("# ").startswith("@package") and line.split()[-1] == "_global_":
            return True
    return False


@functools.cache
def logger_keys(name: str, conf_dir: Path = CONF_DIR) -> tuple[str, ...] | None:
    """The keys of ``logger=name`` (conf/logger/NAME.yaml, which sets every key its logger reads);
    None where that file is not there."""
    path = conf_dir / "logger" / f"{name}.yaml"
    return tuple(str(k) for k in OmegaConf.load(path)) if path.is_file() else None


def check_run_config_keys(cfg: DictConfig) -> None:
    """Refuse a top-level key nobody reads (``+n_pf=8`` for ``budget.n_pf=8``), naming the group's key of
    that name where there is one."""
    known = run_config_keys()
    if not known:
        return
    unknown = sorted(str(k) for k in cfg if k not in known and k != "hydra")  # hydra: a config composed with it
    if not unknown:
        return
    key = unknown[0]
    meant = [f"{group}.{key}" for group in known if isinstance(cfg.get(group), DictConfig) and key in cfg[group]]
    hint = f" ({' or '.join(meant)} {'is' if len(meant) == 1 else 'are'})" if meant else ""
    raise ConfigError(f"{key} is not a key of the run config{hint}; its keys: {', '.join(known)}")


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> leaf value of a nested config container (lists become tuples, comparable)."""
    if isinstance(node, dict):
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: tuple(node) if isinstance(node, list) else node}


# Keys that name files or folders. A run makes them absolute (against the directory the command
# started in) before anything reads them, so config.yaml names the files the run used: a resume
# started from another directory reads the same files, or is refused for naming others, instead
# of sampling the rest of the run from whatever a relative path finds there.
PATH_KEYS = ("engine.table", "dataset.path", "model.path", "model.cache_dir", "traversal.predictor")


def absolute(value: Any) -> str:
    """``value`` as an absolute path, ``~`` expanded, symlinks kept as given (not resolved): a link
    the user repoints (current.ckpt -> v2.ckpt) is still the path named."""
    return os.path.abspath(os.path.expanduser(str(value)))


def absolute_path(key: str, value: Any) -> Any:
    """``value`` of ``key`` as an absolute path where ``key`` is one of PATH_KEYS and ``value`` a path.

    Unchanged: null or empty values, names that are not paths (the embedded model, model=toy's
    ``none``, traversal.predictor's ``default``/``null``), and a model.path that names nothing here
    (a hub id, refused later in its own words).
    """
    if key not in PATH_KEYS or not isinstance(value, str) or not value.strip():
        return value
    if key == "traversal.predictor" and value.strip().lower() in ("default", "null", "none"):
        return value
    from presto.models.assets import DEFAULT_MODEL

    path = os.path.expanduser(value)
    if key == "model.path" and (value in ("none", DEFAULT_MODEL) or not os.path.exists(path)):
        return value
    return absolute(value)


def make_paths_absolute(cfg: DictConfig) -> None:
    """Rewrite ``cfg``'s PATH_KEYS in place as :func:`absolute_path` gives them."""
    for key in PATH_KEYS:
        value = OmegaConf.select(cfg, key, default=None)
        absolute = absolute_path(key, value)
        if absolute != value:
            OmegaConf.update(cfg, key, absolute, merge=False)


def describe_differences(a: dict[str, Any], b: dict[str, Any], joiner: str, ignore=lambda key: False) -> list[str]:
    """'key (a<joiner>b)' for each dotted key whose values differ in two flattened configs."""
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k) and not ignore(k))
    return [f"{k} ({a.get(k)!r}{joiner}{b.get(k)!r})" for k in keys]


def differing_keys(values: Sequence[Mapping[str, Any]]) -> list[str]:
    """The dotted keys, sorted, on which several flattened configs do not all agree (a missing key counts as None)."""
    keys = set().union(*values) if values else set()
    return sorted(k for k in keys if len({repr(v.get(k)) for v in values}) > 1)


def _get(cfg: DictConfig, key: str) -> Any:
    # is_missing() only sees top-level keys; select() raises for a dotted ??? value.
    try:
        return OmegaConf.select(cfg, key, throw_on_missing=True)
    except MissingMandatoryValue:
        raise ConfigError(f"{key} is required but not set (pass {key}=...)") from None


def _number(cfg: DictConfig, key: str, kind: type, minimum: float, strict: bool = False) -> Any:
    value = _get(cfg, key)
    bound = f"> {minimum}" if strict else f">= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        raise ConfigError(f"{key} must be {'an integer' if kind is int else 'a number'} {bound}, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{key} must be a finite number {bound}, got {value}")
    if value < minimum or (strict and value == minimum):
        raise ConfigError(f"{key} must be {bound}, got {value}")
    return kind(value)


def _flag(cfg: DictConfig, key: str, default: bool | None = None) -> bool:
    """A true/false key; Hydra parses ``true``/``false``, so anything else (``no``, ``off``) is a mistake."""
    value = OmegaConf.select(cfg, key, default=default)
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    return value


def _choice(cfg: DictConfig, key: str, allowed: tuple[str, ...]) -> str:
    value = _get(cfg, key)
    if value not in allowed:
        raise ConfigError(f"{key}={value} is not allowed; choose one of: {', '.join(allowed)}")
    return str(value)


SMC_DEFAULT_BLOCKS = 8
"""Power-SMC blocks per answer when ``sampler.block_size`` is null: the paper's Case Study 8
grows 1024-token answers in blocks of 128. (A sampler-specific default because the
experiments set n for every sampler, and B = n would leave Power-SMC one block: no resampling.)"""


def validate_sampler(cfg: DictConfig) -> SamplerSettings:
    name = _choice(cfg, "sampler.name", SAMPLERS)
    alpha = _number(cfg, "sampler.alpha", float, 0.0, strict=True)
    tau = _get(cfg, "sampler.tau")
    tau = 1.0 / alpha if tau is None else _number(cfg, "sampler.tau", float, 0.0, strict=True)
    if not (math.isfinite(tau) and tau > 0):  # 1/alpha overflows for a subnormal alpha (1e-320)
        raise ConfigError(f"sampler.tau=null takes 1/sampler.alpha, which is not a finite number > 0 for alpha={alpha}")
    n = _number(cfg, "sampler.max_new_tokens", int, 1)
    if name == "power_smc" and _get(cfg, "sampler.block_size") is None:
        if n % SMC_DEFAULT_BLOCKS:
            raise ConfigError(
                f"sampler.block_size=null takes n/{SMC_DEFAULT_BLOCKS} tokens per Power-SMC block, but "
                f"sampler.max_new_tokens={n} is not a multiple of {SMC_DEFAULT_BLOCKS}; set sampler.block_size"
            )
        block = n // SMC_DEFAULT_BLOCKS
    else:
        block = _number(cfg, "sampler.block_size", int, 1)
    if n % block:
        raise ConfigError(f"sampler.block_size must divide sampler.max_new_tokens={n}, got {block}")
    steps = _number(cfg, "sampler.steps", int, 0)
    core = {"name", "alpha", "tau", "max_new_tokens", "block_size", "steps"}
    options = {k: v for k, v in OmegaConf.to_container(cfg.sampler, resolve=True).items() if k not in core}
    return SamplerSettings(name, alpha, tau, n, block, steps, options)


def validate(cfg: DictConfig) -> RunSettings:
    """Check everything that can be checked without loading a model or a dataset."""
    check_run_config_keys(cfg)
    seed = _number(cfg, "seed", int, 0)
    if seed >= 2**128:  # random keys carry 128-bit fields (presto.samplers.randomness)
        raise ConfigError(f"seed must be < 2**128, got {seed}")
    sampler = validate_sampler(cfg)
    traversal = _choice(cfg, "traversal.name", TRAVERSALS)
    n_pf = _number(cfg, "budget.n_pf", int, 1)
    chains = _number(cfg, "run.chains_per_prompt", int, 1)
    prompts = _number(cfg, "dataset.num_prompts", int, 1)
    max_nodes = _number(cfg, "run.max_logged_nodes", int, 0)
    check_keys(OmegaConf.to_container(cfg.budget, resolve=True), "budget", "the budget", BUDGET_KEYS)
    check_keys(OmegaConf.to_container(cfg.run, resolve=True), "run", "the run options", RUN_KEYS)
    logger = OmegaConf.select(cfg, "logger.name")
    if logger not in LOGGERS and logger is not None:  # null, like no logger group: no logger
        # Else the run would only fail after the model has loaded.
        raise ConfigError(f"logger.name={logger} is not a logger; choose one of: {', '.join(LOGGERS)}")
    if logger is not None and logger_keys(logger) is not None:
        check_keys(OmegaConf.to_container(cfg.logger, resolve=True), "logger", f"logger={logger}", logger_keys(logger))
    if logger == "wandb":
        from presto.eval.wandb_logger import resolve_mode

        try:  # a typo in the mode would only surface as "logging stopped" once the run is under way
            resolve_mode(OmegaConf.select(cfg, "logger.mode"))
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for key in ("log_rounds", "log_plots"):  # the logger takes bool(value): "no" would be true
            _flag(cfg, f"logger.{key}", default=True)
    engine = _get(cfg, "engine.name")
    from presto.engines import ENGINE_KEYS

    if engine in ENGINE_KEYS:  # here too, so that a sweep's points are checked before its first job
        check_keys(OmegaConf.to_container(cfg.engine, resolve=True), "engine", f"engine={engine}", ENGINE_KEYS[engine])
    if engine == "toy":
        table = _get(cfg, "engine.table")
        if not Path(str(table)).is_file():
            raise ConfigError(f"engine.table: no such file {table}")
    validate_engine(cfg, engine)
    if engine in ("hf", "vllm") and str(OmegaConf.select(cfg, "model.path", default=None)) == "none":
        # conf/model/toy.yaml: without this the run loads the dataset, then names model.path='none'
        raise ConfigError(
            f"model=toy has no model files (it is engine=toy's); engine={engine} needs a model: "
            "model=smollm2 or model.path=DIR (a Hugging Face folder) or a .gguf file"
        )
    validate_dataset(cfg)
    shard = parse_shard(OmegaConf.select(cfg, "dataset.shard", default=None))
    if shard is not None and shard.size(prompts) == 0:
        raise ConfigError(
            f"dataset.shard={shard} holds no prompt of dataset.num_prompts={prompts}: use at most {prompts} shards"
        )
    traversal_options = {k: v for k, v in OmegaConf.to_container(cfg.traversal, resolve=True).items() if k != "name"}
    if traversal in ("sequential", "bfs"):  # rules without options: a key given to them is a mistake
        check_keys(traversal_options, "traversal", f"traversal={traversal}", ())
    return RunSettings(
        seed=seed,
        sampler=sampler,
        traversal=traversal,
        traversal_options=traversal_options,
        n_pf=n_pf,
        chains_per_prompt=chains,
        num_prompts=prompts,
        resume=_flag(cfg, "run.resume"),
        max_logged_nodes=max_nodes,
        progress=_flag(cfg, "run.progress"),
        rescore=_flag(cfg, "run.rescore", default=False),
        shard=shard,
    )


def _optional(cfg: DictConfig, key: str, check) -> None:
    """Run ``check(cfg, key)`` unless the key is absent or null (null takes the default)."""
    if OmegaConf.select(cfg, key, default=None) is not None:
        check(cfg, key)


def validate_engine(cfg: DictConfig, engine: Any) -> None:
    """The engine's own values, here rather than when the engine is built: that is after the task
    has loaded, and a sweep's later points would only fail once the earlier jobs have run.

    The engines check the same values when built (they can be built without this module).
    """
    if engine == "hf":
        from presto.engines.hf import check_dtype

        check_dtype(OmegaConf.select(cfg, "engine.dtype", default="float32"))  # build_engine's default
        from presto.engines.base import check_threads

        check_threads(OmegaConf.select(cfg, "engine.threads", default=None))
        from presto.engines.hf import check_device

        check_device(OmegaConf.select(cfg, "engine.device", default="cpu"))  # build_engine's default
    elif engine == "vllm":
        from presto.engines.vllm import _DEFAULTS, VLLMEngine

        options = OmegaConf.to_container(cfg.engine, resolve=True)
        check_keys(options, "engine", "engine=vllm", ("name", *_DEFAULTS))
        VLLMEngine._check_options({**_DEFAULTS, **{k: v for k, v in options.items() if k != "name"}})


def validate_dataset(cfg: DictConfig) -> None:
    """The dataset keys the tasks read with ``bool()``, ``float()`` or ``int()``: a typo there would
    be a traceback once the task loads, or silently true (``allow_code_execution=no``)."""
    for key in ("allow_code_execution", "use_package"):
        if OmegaConf.select(cfg, f"dataset.{key}", default=None) is not None:
            _flag(cfg, f"dataset.{key}")
    thinking = OmegaConf.select(cfg, "dataset.enable_thinking", default=None)
    if thinking is not None and not isinstance(thinking, bool):
        raise ConfigError(f"dataset.enable_thinking must be true, false or null, got {thinking!r}")
    _optional(cfg, "dataset.timeout_s", lambda c, k: _number(c, k, float, 0.0, strict=True))
    _optional(cfg, "dataset.memory_mb", lambda c, k: _number(c, k, int, 64))  # the sandbox's floor
    _optional(cfg, "dataset.generator_seed", lambda c, k: _number(c, k, int, 0))
    generators = OmegaConf.select(cfg, "dataset.generators", default=None)
    if generators is not None:
        names = OmegaConf.to_container(generators) if OmegaConf.is_config(generators) else generators
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(
                "dataset.generators must be a non-empty list of reasoning-gym generator names "
                f"(null: the default ones), got {names!r}"
            )
