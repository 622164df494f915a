"""Tests that kill the mutants a hand mutation review of config.py and of engines/base.py's request and
result checks found surviving (ids CF = config.py, EB = engines/base.py; the list is at the end of the file).

They validate composed run configs in this process (no CLI subprocess): each bound at and just past
its edge, each value kind a key refuses (booleans, fractions, NaN and infinities, empty names), the
message naming the key, the defaults the module fills in (tau = 1/alpha, Power-SMC's n/8 blocks, the
run switches a config may leave out), which top-level keys a run config has (Hydra's package header),
the dotted flattening that resume and the reports compare configs with, and the engine contract:
a request's bounds and a stopping result that must end at its first EOS.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import open_dict

from presto.config import (
    ConfigError,
    check_run_config_keys,
    describe_differences,
    differing_keys,
    flatten,
    run_config_keys,
    validate,
)
from presto.engines.base import Engine, SuffixRequest, SuffixResult
from tests.conftest import compose_run, toy_overrides, write_toy_table


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return write_toy_table(tmp_path_factory.mktemp("config") / "table.json", vocab=6, seed=3)


def toy_config(table, *overrides: str):
    """The small toy run config of the CLI tests (n=8, B=4), with ``overrides``."""
    return compose_run(*toy_overrides(table), *overrides)


def refused(table, *overrides: str) -> str:
    """The one-line message validate() refuses the config with."""
    with pytest.raises(ConfigError) as err:
        validate(toy_config(table, *overrides))
    message = str(err.value)
    assert "\n" not in message
    return message


# --- numbers: bounds at their edge, and the kinds of value a number key refuses --------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("seed=true", "seed must be an integer >= 0, got True"),
        ("budget.n_pf=true", "budget.n_pf must be an integer >= 1, got True"),
        ("budget.n_pf=1.5", "budget.n_pf must be an integer >= 1, got 1.5"),
        ("run.chains_per_prompt=2.0", "run.chains_per_prompt must be an integer >= 1, got 2.0"),
        ("sampler.alpha=true", "sampler.alpha must be a number > 0.0, got True"),
        ("sampler.alpha=nan", "sampler.alpha must be a finite number > 0.0, got nan"),
        ("sampler.tau=inf", "sampler.tau must be a finite number > 0.0, got inf"),
        ("+dataset.timeout_s=inf", "dataset.timeout_s must be a finite number > 0.0, got inf"),
        ("sampler.alpha=0", "sampler.alpha must be > 0.0, got 0"),
        ("budget.n_pf=0", "budget.n_pf must be >= 1, got 0"),
        ("dataset.num_prompts=0", "dataset.num_prompts must be >= 1, got 0"),
        ("run.max_logged_nodes=-1", "run.max_logged_nodes must be >= 0, got -1"),
        ("sampler.steps=-1", "sampler.steps must be >= 0, got -1"),
        ("+dataset.timeout_s=0", "dataset.timeout_s must be > 0.0, got 0"),
        ("+dataset.memory_mb=63", "dataset.memory_mb must be >= 64, got 63"),
        ("+dataset.generator_seed=-1", "dataset.generator_seed must be >= 0, got -1"),
        (f"seed={2**128}", f"seed must be < 2**128, got {2**128}"),
    ],
)
def test_a_number_out_of_range_or_of_the_wrong_kind_is_one_line_naming_it(table, override, message):
    """CF14 (alpha = 0 admitted), CF15 (true taken as 1), CF16 (1.5 truncated to 1), CF17 (NaN and
    infinities admitted: a NaN alpha is then blamed on tau = null, an infinite timeout passes), CF28
    (seed 2**128 admitted), CF29 (n_pf = 0), CF30 (num_prompts = 0), CF40 (timeout 0), CF41 (memory
    below the sandbox's 64 MB floor), CF42 (generator_seed unchecked): each names its key and bound."""
    assert refused(table, override) == message


def test_each_bound_admits_its_edge(table):
    """CF13 (< made <=: n_pf = 1, steps = 0, seed = 0 refused), CF26 (steps >= 1), CF31 (max_logged_nodes
    >= 1), CF28's other side (2**128 - 1 is the largest seed): the smallest allowed value of each key passes."""
    settings = validate(
        toy_config(
            table,
            "seed=0",
            "budget.n_pf=1",
            "run.chains_per_prompt=1",
            "dataset.num_prompts=1",
            "run.max_logged_nodes=0",
            "sampler.steps=0",
            "sampler.alpha=1e-3",
            "+dataset.memory_mb=64",
            "+dataset.generator_seed=0",
            "+dataset.timeout_s=1e-3",
        )
    )
    assert (settings.seed, settings.n_pf, settings.chains_per_prompt, settings.num_prompts) == (0, 1, 1, 1)
    assert (settings.max_logged_nodes, settings.sampler.steps) == (0, 0)
    assert validate(toy_config(table, f"seed={2**128 - 1}")).seed == 2**128 - 1


def test_a_float_key_given_as_an_integer_is_a_float(table):
    """CF18 (the value returned as given: sampler.alpha=4 stays the int 4). summary.json records the
    settings' alpha, and the reports group runs by the repr of their summary's alpha (eval/runs.py
    Run.task), so a run with alpha=4 and one with the default 4.0 would be two tasks."""
    sampler = validate(toy_config(table, "sampler.alpha=4", "sampler.tau=1")).sampler
    assert repr((sampler.alpha, sampler.tau)) == "(4.0, 1.0)"


# --- names, required keys, and the keys a section may hold ----------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sampler.name=nope", "sampler.name=nope is not allowed; choose one of: powermh, entropycut"),
        ("traversal.name=dfs", "traversal.name=dfs is not allowed; choose one of: sequential, bfs, predictive"),
        ("sampler.alpha=???", "sampler.alpha is required but not set (pass sampler.alpha=...)"),
        ("engine.table=???", "engine.table is required but not set (pass engine.table=...)"),
        ("+budget.npf=3", "budget.npf is not a key of the budget; its own keys: n_pf"),
        ("+logger.foo=1", "logger.foo is not a key of logger=none; its own keys: name"),
        ("logger.name=''", "logger.name= is not a logger; choose one of: none, wandb"),
        ("traversal=bfs +traversal.predictor=x", "traversal.predictor is not a key of traversal=bfs; its own keys:"),
    ],
)
def test_a_name_or_key_nobody_reads_is_one_line(table, override, message):
    """CF12 (a ??? value a raw MissingMandatoryValue), CF20 (a sampler or traversal name outside the
    choices: Hydra only checks group options, not ``sampler.name=``), CF32 (budget keys unchecked), CF33
    (an empty logger name taken for no logger), CF34 (logger keys unchecked), CF45 (bfs given a
    predictive key)."""
    assert refused(table, *override.split()).startswith(message)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+n_pf=8", "n_pf is not a key of the run config (budget.n_pf is); its keys: "),
        ("+name=x", "name is not a key of the run config (dataset.name or engine.name or "),
    ],
)
def test_a_mistyped_top_level_key_names_the_group_keys_it_may_mean(table, override, message):
    """CF6 (is/are swapped), CF7 (the hint looks the key up in the run config instead of the group)."""
    line = refused(table, override)
    assert line.startswith(message)
    if override == "+name=x":
        assert "sampler.name or traversal.name are); its keys:" in line


def test_a_config_composed_with_its_hydra_node_passes_the_key_check(table):
    """CF5 (the hydra node refused as an unknown key; no caller composes with it today, so this pins the
    exemption the code states), CF2 (hydra named among the run config's keys): Hydra's own node
    (compose(..., return_hydra_config=True)) is no user key."""
    assert "hydra" not in run_config_keys()
    cfg = toy_config(table)
    with open_dict(cfg):
        cfg.hydra = {"run": {"dir": "somewhere"}}
    check_run_config_keys(cfg)
    validate(cfg)


def test_only_a_global_package_header_sets_top_level_keys(tmp_path):
    """CF3 (any ``@package`` header taken as _global_): an option of a group whose header names
    another package (here Hydra's default, _group_) puts its keys under the group's name, so the group
    is the run config's key; a _global_ option's keys are top-level keys."""
    (tmp_path / "config.yaml").write_text("defaults:\n  - engine: a\n  - extra: x\n  - _self_\nseed: 0\n")
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "a.yaml").write_text("# @package _group_\nname: a\n")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "x.yaml").write_text("# @package _global_\n# comment\nfoo: 1\n")
    assert run_config_keys(tmp_path) == ("engine", "foo", "seed")


# --- defaults the module fills in ---------------------------------------------------------------


def test_tau_null_is_one_over_alpha(table):
    """CF21 (tau defaulted to alpha): conf/sampler's ``tau: null = 1/alpha``."""
    assert validate(toy_config(table, "sampler.alpha=2", "sampler.tau=null")).sampler.tau == 0.5
    assert validate(toy_config(table, "sampler.alpha=2", "sampler.tau=0.25")).sampler.tau == 0.25


def test_power_smc_without_a_block_size_grows_eighths(table):
    """CF23 (another default block count), CF24 (n not a multiple of 8 admitted: the block would not
    divide n), CF25 (a block that does not divide n admitted)."""
    smc = ("sampler=power_smc", "sampler.block_size=null")
    settings = validate(toy_config(table, *smc, "sampler.max_new_tokens=1024"))
    assert (settings.sampler.max_new_tokens, settings.sampler.block_size) == (1024, 128)
    message = refused(table, *smc, "sampler.max_new_tokens=12")
    assert message.startswith("sampler.block_size=null takes n/8 tokens per Power-SMC block, but ")
    assert "sampler.max_new_tokens=12 is not a multiple of 8" in message
    assert refused(table, "sampler.block_size=3") == "sampler.block_size must divide sampler.max_new_tokens=8, got 3"


def test_the_sampler_options_are_its_own_keys(table):
    """CF27 (steps left among the sampler-specific options, which the kernels check against their own keys)."""
    settings = validate(toy_config(table, "sampler=multitry"))
    assert set(settings.sampler.options) == {"num_candidates", "temperatures"}
    assert validate(toy_config(table)).sampler.options == {}


def test_the_run_switches_are_read_from_their_own_keys_and_may_be_left_out(table):
    """CF19 (the default of a switch ignored: a config without run.rescore, as runs before it had, or a
    wandb logger without log_rounds, refused), CF47 (progress read from run.resume)."""
    settings = validate(toy_config(table, "run.resume=false", "run.progress=true", "~run.rescore"))
    assert (settings.resume, settings.progress, settings.rescore) == (False, True, False)
    settings = validate(toy_config(table, "run.resume=true", "run.progress=false", "run.rescore=true"))
    assert (settings.resume, settings.progress, settings.rescore) == (True, False, True)
    validate(toy_config(table, "logger=wandb", "logger.mode=disabled", "~logger.log_rounds", "~logger.log_plots"))


# --- dataset and engine keys ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("dataset.enable_thinking=maybe", "dataset.enable_thinking must be true, false or null, got 'maybe'"),
        ("+dataset.generators=[]", "dataset.generators must be a non-empty list"),
        ("+dataset.generators=[chain_sum,'']", "dataset.generators must be a non-empty list"),
        ("+dataset.use_package=no", "dataset.use_package must be true or false, got 'no'"),
    ],
)
def test_a_bad_dataset_value_is_one_line(table, override, message):
    """CF39 (enable_thinking unchecked), CF43 (an empty generator list), CF44 (an empty generator name),
    CF48 (use_package unchecked)."""
    assert refused(table, override).startswith(message)


def test_the_toy_model_on_vllm_is_refused_before_anything_loads():
    """CF37 (only engine=hf checked for model=toy's path 'none'), in process."""
    with pytest.raises(ConfigError, match=r"^model=toy has no model files \(it is engine=toy's\); engine=vllm needs"):
        validate(compose_run("engine=vllm", "model=toy", "dataset=toy", "experiment=none"))


# --- flattened configs: what resume and the reports compare -------------------------------------


def test_flatten_gives_dotted_keys_and_comparable_leaves():
    """CF8 (lists left as lists), CF9 (the section prefix dropped: run.seed and sampler.seed one key)."""
    flat = flatten({"sampler": {"temperatures": [1.0, 0.5], "seed": 1}, "seed": 2, "run": {"a": {"b": None}}})
    assert flat == {"sampler.temperatures": (1.0, 0.5), "sampler.seed": 1, "seed": 2, "run.a.b": None}
    assert flatten([1, 2], "x") == {"x": (1, 2)}
    assert len({flat["sampler.temperatures"]}) == 1  # a tuple: hashable


def test_differences_list_the_keys_that_differ_and_skip_ignored_ones():
    """CF10 (``ignore`` not applied), CF11 (a key on which all configs agree listed as differing)."""
    a, b = {"x": 1, "y": 2, "z": 3}, {"x": 1, "y": 5, "w": 4}
    assert describe_differences(a, b, " -> ") == ["w (None -> 4)", "y (2 -> 5)", "z (3 -> None)"]
    assert describe_differences(a, b, " vs ", ignore=lambda key: key in ("y", "w")) == ["z (3 vs None)"]
    assert differing_keys([a, b, {"x": 1, "y": 2, "z": 3}]) == ["w", "y", "z"]
    assert differing_keys([{"x": 1}, {"x": 1}]) == []
    assert differing_keys([{"x": 1}, {"x": 1.0}]) == ["x"]  # repr: 1 and 1.0 are different settings
    assert differing_keys([]) == []


# --- engines/base.py: the request and result contract -------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (dict(num_new_tokens=0), "num_new_tokens must be >= 1, got 0"),
        (dict(temperature=0.0), "temperature must be > 0, got 0.0"),
        (dict(temperature=math.nan), "temperature must be > 0, got nan"),
        (dict(extra_temperatures=(1.0, 0.0)), "extra_temperatures must all be > 0"),
        (dict(extra_temperatures=(math.nan,)), "extra_temperatures must all be > 0"),
        (dict(seed=2**63), "seed must be in [0, 2**63)"),
        (dict(seed=-1), "seed must be in [0, 2**63)"),
        (dict(seed=True), "seed must be an int, got True"),
        (dict(stop_at_eos=1), "stop_at_eos must be a bool, got 1"),
    ],
)
def test_a_request_out_of_its_bounds_is_refused(args, message):
    """EB3 (0 new tokens admitted), EB4 (temperature 0 or NaN admitted), EB5 (an extra temperature 0 or
    NaN admitted), EB6 (seed 2**63 admitted), EB7 (stop_at_eos=1 admitted), EB8 and EB18 (True admitted
    as a seed: bool is an int to Python)."""
    request = {"prefix": (1,), "num_new_tokens": 2, "temperature": 1.0, "seed": 0, **args}
    with pytest.raises(ValueError) as err:
        SuffixRequest(**request)
    assert str(err.value).startswith(message)
    SuffixRequest((1,), 1, 1e-3, 2**63 - 1, (1e-3,))  # each edge itself is admitted


class CannedEngine(Engine):
    """Returns the given token arrays, whatever the requests (to test what generate() checks)."""

    name = "canned"
    min_temperature = 0.5
    vocab_size = 6

    def __init__(self, *tokens, eos=frozenset({2}), limit=None) -> None:
        super().__init__()
        self.tokens, self.eos, self.limit = [np.asarray(t, dtype=np.int64) for t in tokens], eos, limit

    @property
    def eos_token_ids(self):
        return self.eos

    def max_sequence_tokens(self):
        return self.limit

    def _generate(self, requests):
        zeros = [np.zeros(len(t)) for t in self.tokens]
        return [SuffixResult(t, z, z, z, z[:, None][:, :0]) for t, z in zip(self.tokens, zeros, strict=True)]


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ((1, 2, 3, 2), 2),  # runs past its first EOS (position 1) to a second one
        ((1, 2, 3, 4), 2),  # the full length, but past an EOS
    ],
)
def test_a_stopping_result_must_end_at_its_first_eos(tokens, expected):
    """EB10 (the last EOS taken for the stop), EB11 (a full-length result of a stopping request not
    checked): a result of ``stop_at_eos`` ends right after its first EOS."""
    request = SuffixRequest((1,), 4, 1.0, 0, stop_at_eos=True)
    line = rf"returned 4 tokens for a request of 4 that stops at EOS \(expected {expected}\)"
    with pytest.raises(RuntimeError, match=line):
        CannedEngine(tokens).generate([request])
    (result,) = CannedEngine((1, 2)).generate([request])
    assert result.tokens.tolist() == [1, 2]
    (result,) = CannedEngine((1, 2, 3, 2)).generate([SuffixRequest((1,), 4, 1.0, 0)])  # not stopping: full length
    assert result.tokens.tolist() == [1, 2, 3, 2]


def test_the_engine_limits_admit_their_edge():
    """EB12 (the lowest temperature itself refused), EB13 (token id vocab_size admitted), EB14 (a
    sequence of exactly the engine's length refused), EB15 (the new tokens left out of the length)."""
    engine = CannedEngine((1, 1), limit=4)
    engine.generate([SuffixRequest((0, 5), 2, 0.5, 0, (0.5,))])  # T = min_temperature, id 5, 2 + 2 = limit
    with pytest.raises(ValueError, match=r"token id 6, outside the vocabulary \[0, 6\) of engine=canned"):
        engine.generate([SuffixRequest((0, 6), 2, 0.5, 0)])
    with pytest.raises(ConfigError, match=r"^a request \(prefix \+ new tokens\) needs 5 tokens but engine=canned"):
        engine.generate([SuffixRequest((0, 1, 2), 2, 0.5, 0)])
    with pytest.raises(ConfigError, match=r"samples at temperatures >= 0.5, got 0.25"):
        engine.generate([SuffixRequest((0,), 2, 1.0, 0, (0.25,))])
    assert engine.stats.calls == 1


# Mutants of the review (58: 33 killed by existing tests, 21 by this file only, 4 equivalent for today's
# callers, which this file kills too)
#
# config.py (43: 24 existing, 15 new, 4 equivalent)
#   CF9 flatten without the section prefix, CF10 ``ignore`` dropped, CF27 steps among the sampler
#   options: existing (test_long_runs_review shrinking resume). CF13 non-strict bounds made strict:
#   existing (test_engines_review hf device; seed 0 refused). CF21 tau default = alpha, CF22 the
#   finite-tau check dropped: existing (test_runner_review_fixes overflowing tau). CF35 wandb switches
#   unchecked: existing (test_runner_review2 wandb switches). CF39 enable_thinking, CF40 timeout_s >= 0,
#   CF41 memory_mb >= 1, CF42 generator_seed unchecked, CF43 an empty generator list, CF48 use_package
#   unchecked: existing (test_runner_review2 dataset keys). CF2 hydra among the keys, CF6 is/are, CF7
#   hint looked up at the top: existing (test_cli mistyped top-level key). CF12 raw MissingMandatoryValue,
#   CF14 strict bounds made non-strict, CF25 block not dividing n, CF29 n_pf >= 0, CF32 budget keys
#   unchecked: existing (test_cli bad input). CF34 logger keys unchecked: existing (test_cli mistyped
#   logger key). CF23 another default block count: existing (eval/test_eval_baselines block defaults).
#   CF47 progress read from run.resume: existing (test_cli_matrix_review progress bar).
#   New (this file): CF11 differing_keys >= 1 (every key listed as differing), CF15 booleans taken as
#   numbers, CF16 fractions truncated for integer keys, CF17 NaN/inf admitted (test_cli's nan and inf
#   cases still pass: the tau = 1/alpha check then names sampler.alpha or sampler.tau; an infinite
#   dataset.timeout_s goes through), CF18 an integer given for a float key kept an int (summary.json's
#   alpha 4 vs 4.0 are two tasks to eval/runs.py), CF19 switch defaults ignored (~run.rescore refused),
#   CF20 sampler.name/traversal.name outside the choices (Hydra checks group options only), CF24 Power-SMC's
#   n/8 with n not a multiple of 8, CF26 steps >= 1 (refuses conf/sampler/power_smc.yaml's steps: 0),
#   CF28 seed 2**128 admitted, CF30 num_prompts >= 0, CF31 max_logged_nodes >= 1, CF33 an empty logger
#   name taken for no logger, CF37 model=toy with engine=vllm (test_cli_matrix_review covers hf only),
#   CF44 an empty generator name.
#   CF45 (bfs given an option left to the traversal): killed by this file in validate() itself, but
#       equivalent for every caller: run(), the sweep check and benchmark.py all build the traversal
#       (Traversal.from_options, the same check and message) before anything loads.
#   CF3 (any ``@package`` header taken as _global_): equivalent on the shipped conf/ (every header there
#       is _global_); killed by this file on a conf with a _group_ header, where it would accept the
#       group's keys at the top and refuse the group.
#   CF5 (the hydra node refused): equivalent today (Hydra deletes it from a job's config and no caller
#       composes with return_hydra_config); killed by this file, which pins the stated exemption.
#   CF8 (flatten keeps lists): equivalent: every consumer compares flattened values with != or repr, on
#       two sides flattened alike, so only the printed form of a list in a difference message changes;
#       the flatten test asserts the docstring's tuples (it is there for CF9).
#
# engines/base.py (15: 9 existing, 6 new)
#   EB1 threads >= 0, EB2 True as a thread count: existing (test_runner_review2 engine keys). EB7
#   stop_at_eos=1 admitted, EB11 a full-length stopping result not checked: existing
#   (test_engine_stop_at_eos). EB8 True as num_new_tokens, EB13 id == vocab_size admitted, EB18 seed not
#   type-checked: existing (test_engines_review). EB12 the lowest temperature refused, EB14 a sequence of
#   exactly the limit refused: existing (test_engine_limits).
#   New (this file): EB3 num_new_tokens 0, EB4 temperature 0 or NaN, EB5 an extra temperature 0 or NaN,
#   EB6 seed 2**63 admitted, EB10 a stopping result checked against its last EOS, EB15 the new tokens
#   left out of the length check.
