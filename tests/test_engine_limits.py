"""What an engine refuses up front: temperatures it would not sample at, sequences it cannot serve."""

from __future__ import annotations

import json

import pytest

from presto.config import ConfigError, SamplerSettings
from presto.engines.base import SuffixRequest
from presto.engines.chat_text import generation_eos
from presto.engines.toy import ToyEngine
from presto.runner.run import check_engine_serves
from presto.tasks import build_task


class LimitedToyEngine(ToyEngine):
    """The toy engine with a real engine's limits: a lowest temperature, a context length."""

    min_temperature = 0.01
    score_extra_tokens = 1  # as vLLM's scoring

    def __init__(self, table, prompt_tokens: int, context: int) -> None:
        super().__init__(table)
        self.prompt_tokens, self.context = prompt_tokens, context

    def encode_prompt(self, messages, raw_prompt="", **template_kwargs):
        return list(range(self.prompt_tokens))

    def max_sequence_tokens(self):
        return self.context


def sampler(tau: float, n: int = 8, **options) -> SamplerSettings:
    return SamplerSettings("multitry", 4.0, tau, n, n, 2, options)


def test_a_temperature_below_the_engines_is_refused_not_silently_raised(toy_table):
    engine = LimitedToyEngine(toy_table, 3, 100)
    with pytest.raises(ConfigError, match=r"samples at temperatures >= 0.01, got 0.005"):
        engine.generate([SuffixRequest((1, 2), 2, 0.005, 7)])
    with pytest.raises(ConfigError, match=r"got 0\.001"):  # an extra temperature (MultiTryMH's set) too
        engine.generate([SuffixRequest((1, 2), 2, 0.5, 7, (0.001, 1.0))])
    assert engine.stats.calls == 0
    assert len(engine.generate([SuffixRequest((1, 2), 2, 0.01, 7)])) == 1


def test_the_run_checks_every_prompt_and_temperature_before_any_chain(toy_table):
    task = build_task({"name": "toy", "num_prompts": 3})
    problems = task.load()
    engine = LimitedToyEngine(toy_table, prompt_tokens=10, context=18)
    check_engine_serves(engine, task, problems, sampler(0.25), rescore=False)  # 10 + 8 fits exactly
    with pytest.raises(
        ConfigError,
        match=r"prompt toy/0 with sampler.max_new_tokens=8 and run.rescore=true .*"
        r"needs 19 tokens .* at most 18",
    ):
        check_engine_serves(engine, task, problems, sampler(0.25), rescore=True)  # vLLM's rescoring takes one more
    engine.score_extra_tokens = 0  # the transformers engine scores prompt + answer in exactly those positions
    check_engine_serves(engine, task, problems, sampler(0.25), rescore=True)
    with pytest.raises(ConfigError, match=r"got 0\.005"):
        check_engine_serves(engine, task, problems, sampler(0.25, temperatures=[0.005, 1.0]), rescore=False)
    with pytest.raises(ConfigError, match=r"got 0\.004"):
        check_engine_serves(engine, task, problems, sampler(0.004), rescore=False)
    assert engine.stats.calls == 0, "nothing may be generated before the checks pass"


def test_a_toy_prompt_takes_chat_template_options(toy_table):
    assert ToyEngine(toy_table).encode_prompt([{"role": "user", "content": "x"}], "", enable_thinking=False) == []


def test_eos_declared_only_in_config_json_is_read_like_transformers(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "eos_token_id": [2, 0]}))
    assert list(generation_eos(str(tmp_path))) == [2, 0]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 5}))
    assert generation_eos(str(tmp_path)) == 5
