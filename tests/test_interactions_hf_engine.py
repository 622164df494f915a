"""The transformers engine (engine=hf) in a researcher's flows: runs, baselines, limits, resumes and scripts.

An interaction review of ``presto.engines.hf`` as ``src/main.py`` and the scripts use it: every test
runs the run loop (``presto.runner.run.run``) or a script's ``main`` in this process, on the tiny
float64 test model (``presto.models.make_tiny_model``) and a local MATH-500 file of three prompts
(56, 56 and 283 tokens with the chat template), so nothing but the tiny model is loaded. Derived model
folders (fewer positions, many EOS ids, missing files) are the tiny model's files with one thing
changed. The review found five defects, fixed since, each kept here as a test: a folder with config.json but
no weights, tokenizer or readable config ended in a traceback; engine.threads=null kept an earlier engine's count;
only lowtemp recorded generated_tokens; a resume did not notice replaced weights; scripts/benchmark.py ran chains
before finding a prompt too long for the model.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from presto.config import ConfigError  # noqa: E402
from presto.engines import build_engine  # noqa: E402
from presto.models import make_tiny_model  # noqa: E402
from presto.runner import run as run_module  # noqa: E402
from presto.runner.outputs import read_jsonl  # noqa: E402
from tests.conftest import call_script, compose_run, load_script  # noqa: E402

MATH_ROWS = [
    {"problem": "What is 1+1?", "answer": "2", "unique_id": "p0"},
    {"problem": "What is 2+2?", "answer": "4", "unique_id": "p1"},
    {
        "problem": "What is the sum " + " plus ".join(str(i) for i in range(60)) + "?",
        "answer": "1770",
        "unique_id": "p2",
    },
]
SHORT_PROMPT_TOKENS = 56  # p0 and p1 through SmolLM2's chat template


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The tiny float64 model, folders derived from it, and the local MATH-500 file."""
    root = tmp_path_factory.mktemp("hf_interactions")
    base = make_tiny_model(root / "tiny", dtype="float64", seed=1)
    data = root / "math.jsonl"
    data.write_text(
        "".join(json.dumps({"solution": r["answer"], "subject": "a", "level": 1, **r}) + "\n" for r in MATH_ROWS)
    )

    def derived(name: str, *, leave_out: tuple[str, ...] = (), config=None, generation=None) -> Path:
        folder = root / name
        folder.mkdir()
        for path in base.iterdir():
            if path.name in leave_out or path.name.startswith("."):
                continue
            if path.suffix == ".safetensors":  # the weights are shared, the small files copied to be changed
                (folder / path.name).symlink_to(path)
            else:
                shutil.copy(path, folder)
        for file, change in (("config.json", config), ("generation_config.json", generation)):
            if change is not None:
                values = json.loads((folder / file).read_text())
                change(values)
                (folder / file).write_text(json.dumps(values))
        return folder

    def damaged(config: Path) -> Path:
        config.write_text('{"model_type": "llama",')  # cut short: not JSON
        return config.parent

    def positions(values):
        values["max_position_embeddings"] = SHORT_PROMPT_TOKENS + 8

    def many_eos(values):  # about one token in four ends the answer: the baselines stop early
        values["eos_token_id"] = [2, *range(3, 49152, 4)]  # SmolLM2's vocabulary: 49152 ids

    return {
        "base": base,
        "data": data,
        "short": derived("short", config=positions),  # 64 positions: a short prompt and 8 new tokens
        "eos": derived("eos", generation=many_eos),
        "no_weights": derived("no_weights", leave_out=("model.safetensors",)),
        "no_tokenizer": derived("no_tokenizer", leave_out=("tokenizer.json", "tokenizer_config.json")),
        "bad_config": damaged(derived("bad_config") / "config.json"),
    }


def overrides(assets, *extra: str, model: str = "base") -> tuple[str, ...]:
    """Two short MATH-500 prompts on the tiny model in float64, n = 12 in two blocks of 6, K = 3."""
    return (
        "engine=hf",
        f"model.path={assets[model]}",
        "engine.dtype=float64",
        "experiment=none",
        "dataset=math500",
        f"dataset.path={assets['data']}",
        "dataset.num_prompts=2",
        "sampler.max_new_tokens=12",
        "sampler.block_size=6",
        "sampler.steps=3",
        "budget.n_pf=4",
        "run.progress=false",
        *extra,
    )


def run_here(run_dir: Path, assets, *extra: str, model: str = "base") -> dict:
    return run_module.run(compose_run(*overrides(assets, *extra, model=model)), run_dir)


def chains(run_dir: Path) -> dict:
    return {(r["prompt_id"], r["chain"]): r for r in read_jsonl(run_dir / "chains.jsonl")}


# --- exact PreSTO chains through the run loop ------------------------------------------------------


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "multitry"])
def test_presto_runs_in_float64_write_the_sequential_runs_chains(assets, tmp_path, sampler):
    """The whole run loop (prompts through the chat template, several blocks, tree logging, records):
    every traversal's chains.jsonl holds the sequential run's chains token for token."""
    runs = {t: tmp_path / t for t in ("sequential", "bfs", "predictive")}
    summaries = {t: run_here(d, assets, f"sampler={sampler}", f"traversal={t}") for t, d in runs.items()}
    reference = chains(runs["sequential"])
    assert len(reference) == 2
    for traversal in ("bfs", "predictive"):
        got = chains(runs[traversal])
        assert got.keys() == reference.keys()
        for key, record in got.items():
            assert record["tokens"] == reference[key]["tokens"], (traversal, key)
            assert record["accepts"] == reference[key]["accepts"], (traversal, key)
            assert record["loglik"] == pytest.approx(reference[key]["loglik"], abs=1e-9)
        assert read_jsonl(runs[traversal] / "trees.jsonl")  # its rounds were logged
        assert summaries[traversal]["model_calls"] < summaries["sequential"]["model_calls"]
    for summary in summaries.values():
        assert summary["complete"] and summary["engine_calls"] == summary["model_calls"]  # the warm-up is not counted
        assert summary["graded"] == 2  # math-verify graded the decoded text


def test_a_float32_presto_run_warns_once_and_its_summary_is_sane(assets, tmp_path, capsys):
    summary = run_here(tmp_path / "run", assets, "engine.dtype=float32", "traversal=bfs")
    err = capsys.readouterr().err
    assert err.count("WARNING: engine=hf in float32 is not batch-invariant") == 1
    assert summary["complete"] and summary["chains"] == 2
    for key in ("loglik_mean", "confidence_mean", "call_time_s", "time_per_call_s", "transitions_per_call"):
        assert math.isfinite(summary[key]), key
    assert summary["loglik_mean"] <= 0 and summary["transitions_per_call"] > 0.75  # more than sequential's 12/16
    run_here(tmp_path / "run64", assets, "traversal=bfs")
    # float32 and float64 of the same weights: where a chain took the same tokens (most do; a decision within
    # float32 rounding of its threshold may not), the same log-likelihood up to float32 rounding
    reference = chains(tmp_path / "run64")
    same = [(r, reference[k]) for k, r in chains(tmp_path / "run").items() if r["tokens"] == reference[k]["tokens"]]
    assert same
    for record, exact in same:
        assert record["loglik"] == pytest.approx(exact["loglik"], rel=1e-4)
        assert record["loglik"] != exact["loglik"]  # it did run in float32


def test_a_bfloat16_run_completes_with_finite_statistics(assets, tmp_path):
    summary = run_here(tmp_path / "run", assets, "engine.dtype=bfloat16", "traversal=sequential")
    assert summary["complete"] and math.isfinite(summary["loglik_mean"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("engine.dtype=float16", r"engine\.dtype must be one of float32, float64, bfloat16, got 'float16'"),
        ("engine.dtype=fp64", r"engine\.dtype must be one of"),
        ("engine.threads=0", r"engine\.threads must be an integer >= 1 or null, got 0"),
        ("engine.device=tpu", r"engine\.device=tpu is not a torch device"),
        ("engine.device=mps", r"engine\.device=mps: the hf engine runs on cpu or cuda"),
        ("model.path=none", r"model=toy has no model files"),  # conf/model/toy.yaml's path
    ],
)
def test_a_bad_engine_value_is_one_line_before_anything_loads(assets, tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        run_here(tmp_path / "run", assets, override)
    assert not (tmp_path / "run" / "chains.jsonl").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_on_a_machine_without_one_is_one_line(assets, tmp_path):
    with pytest.raises(ConfigError, match=r"engine\.device=cuda but torch sees no CUDA GPU"):
        run_here(tmp_path / "run", assets, "engine.device=cuda")


def test_an_explicit_thread_count_is_what_the_engine_runs_on(assets):
    before = torch.get_num_threads()
    try:
        build_engine({"name": "hf", "dtype": "float64", "threads": 2}, {"path": str(assets["base"])})
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_threads_null_after_an_engine_with_a_thread_count_runs_on_the_default(assets):
    from presto.engines.hf import default_threads

    before = torch.get_num_threads()
    omp = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    default = int(omp) if omp.isdigit() else default_threads()  # README: "null (all usable cores) or OMP_NUM_THREADS"
    other = 2 if default != 2 else 1
    try:
        build_engine({"name": "hf", "dtype": "float64", "threads": other}, {"path": str(assets["base"])}).close()
        build_engine({"name": "hf", "dtype": "float64", "threads": None}, {"path": str(assets["base"])})
        assert torch.get_num_threads() == default
    finally:
        torch.set_num_threads(before)


# --- model.path variants -----------------------------------------------------------------------------


def user_error(assets, model: str, tmp_path: Path) -> str:
    """The one-line message a run gets for ``model.path`` (a user error the CLI prints as ``error:``)."""
    from presto.cli import user_errors

    path = assets[model] if model in assets else tmp_path / model
    with pytest.raises(user_errors()) as err:
        build_engine({"name": "hf", "dtype": "float64"}, {"path": str(path)})
    message = str(err.value)
    assert "\n" not in message.strip() and "model.path" in message, message
    return message


@pytest.mark.parametrize(("model", "says"), [("missing", "does not exist"), ("empty", "folder without config.json")])
def test_a_model_path_that_is_no_model_is_one_line(assets, tmp_path, model, says):
    (tmp_path / "empty").mkdir()
    assert says in user_error(assets, model, tmp_path)


@pytest.mark.parametrize("model", ["no_weights", "no_tokenizer", "bad_config"])
def test_an_incomplete_model_folder_is_one_line(assets, tmp_path, model):
    user_error(assets, model, tmp_path)


# --- baselines: stop at EOS, count calls and tokens --------------------------------------------------


def decode(assets, tokens) -> str:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(assets["base"])).decode(tokens, skip_special_tokens=False)


def eos_ids(assets) -> set[int]:
    return set(json.loads((assets["eos"] / "generation_config.json").read_text())["eos_token_id"])


@pytest.mark.parametrize(
    "sampler", ["lowtemp", "best_of_n sampler.num_samples=3", "power_smc sampler.num_particles=3 sampler.block_size=4"]
)
def test_a_baseline_on_hf_stops_at_eos_and_counts_its_calls(assets, tmp_path, sampler):
    name, *options = sampler.split()
    summary = run_here(tmp_path / "run", assets, f"sampler={name}", *options, model="eos")
    eos = eos_ids(assets)
    records = list(chains(tmp_path / "run").values())
    assert summary["traversal"] == "none" and summary["transitions"] == 0 and summary["graded"] == 2
    assert summary["engine_calls"] == summary["model_calls"] == sum(r["model_calls"] for r in records)
    stopped = 0
    for record in records:
        tokens = record["tokens"]
        assert 1 <= len(tokens) <= 12 and record["call_time_s"] > 0
        hits = [i for i, t in enumerate(tokens) if t in eos]
        assert hits in ([], [len(tokens) - 1]), tokens  # ends at its first EOS, or runs the full n
        assert hits or len(tokens) == 12
        stopped += bool(hits)
        assert record["text"] == decode(assets, tokens[:-1] if hits else tokens)  # graded: the text before it
    assert stopped  # with one token in four an EOS, the answers did stop
    if name == "lowtemp":
        assert all(r["model_calls"] == 1 and r["generated_tokens"] == len(r["tokens"]) for r in records)
    if name == "best_of_n":
        assert all(r["candidate_scores"][r["selected"]] == max(r["candidate_scores"]) for r in records)
    if name == "power_smc":
        assert all(r["model_calls"] <= 3 for r in records)  # one call per block of 4 while a particle grows


def test_an_mh_chain_keeps_its_fixed_horizon_past_eos_and_grades_the_text_before_it(assets, tmp_path):
    run_here(tmp_path / "run", assets, "traversal=bfs", model="eos")
    eos = eos_ids(assets)
    for record in chains(tmp_path / "run").values():
        assert len(record["tokens"]) == 12
        first = next((i for i, t in enumerate(record["tokens"]) if t in eos), None)
        assert first is not None  # the horizon ran past an EOS
        assert record["text"] == decode(assets, record["tokens"][:first])  # graded: the text before it
        assert record["correct"] is not None


def test_a_float64_rescore_gives_the_chains_own_statistics(assets, tmp_path):
    """run.rescore=true: a fresh p0 pass over prompt + final tokens (Engine.score) against what generation
    and the MH splices recorded, through PreSTO rounds and two blocks."""
    run_here(tmp_path / "run", assets, "traversal=bfs", "run.rescore=true")
    for record in chains(tmp_path / "run").values():
        assert record["loglik_rescored"] == pytest.approx(record["loglik"], abs=1e-9)
        assert record["confidence_rescored"] == pytest.approx(record["confidence"], abs=1e-9)


@pytest.mark.parametrize("sampler", ["best_of_n sampler.num_samples=3", "power_smc sampler.num_particles=3"])
def test_every_baseline_record_counts_the_tokens_it_generated(assets, tmp_path, sampler):
    name, *options = sampler.split()
    run_here(tmp_path / "run", assets, f"sampler={name}", *options, model="eos")
    for record in chains(tmp_path / "run").values():
        assert record["generated_tokens"] >= len(record["tokens"])


# --- sequences past the model's positions --------------------------------------------------------------


def test_a_prompt_and_answer_that_exactly_fill_the_positions_run(assets, tmp_path):
    summary = run_here(
        tmp_path / "run", assets, "sampler.max_new_tokens=8", "sampler.block_size=4", "traversal=bfs", model="short"
    )
    assert summary["complete"]


@pytest.mark.parametrize(
    "extra",
    [
        ("sampler.max_new_tokens=12",),  # 56 + 12 > 64
        ("sampler.max_new_tokens=8", "sampler.block_size=4", "dataset.num_prompts=3"),  # p2 alone: 283 tokens
        ("sampler=lowtemp", "sampler.max_new_tokens=12"),
        ("sampler=power_smc", "sampler.max_new_tokens=12", "sampler.block_size=4"),
    ],
)
def test_a_sequence_past_the_positions_is_refused_before_any_chain(assets, tmp_path, extra):
    with pytest.raises(
        ConfigError, match=r"prompt p\d with sampler\.max_new_tokens=\d+ needs \d+ tokens .* at most 64"
    ):
        run_here(tmp_path / "run", assets, *extra, model="short")
    assert not (tmp_path / "run" / "chains.jsonl").exists()


# --- resumes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("engine.dtype=float32", "engine.dtype ('float64' -> 'float32')"),
        ("engine.threads=1", "engine.threads (None -> 1)"),
        ("model.path=OTHER", "model.path"),
    ],
)
def test_a_resume_with_another_dtype_threads_or_model_is_refused(assets, tmp_path, change, named):
    run_dir = tmp_path / "run"
    run_here(run_dir, assets, "dataset.num_prompts=1")
    before = (run_dir / "chains.jsonl").read_text()
    change = change.replace("OTHER", str(assets["eos"]))
    with pytest.raises(ConfigError, match="was made with another config") as err:
        run_here(run_dir, assets, "run.resume=true", change)
    assert named in str(err.value)
    assert (run_dir / "chains.jsonl").read_text() == before


def test_a_resume_on_another_engine_is_refused(assets, tmp_path, toy_table):
    run_dir = tmp_path / "run"
    run_here(run_dir, assets, "dataset.num_prompts=1")
    cfg = compose_run(
        "engine=toy",
        "model=toy",
        f"engine.table={toy_table}",
        "experiment=none",
        "dataset=toy",
        "dataset.num_prompts=1",
        "sampler.max_new_tokens=12",
        "sampler.block_size=6",
        "sampler.steps=3",
        "run.progress=false",
        "run.resume=true",
    )
    with pytest.raises(ConfigError, match=r"engine\.name \('hf' -> 'toy'\)"):
        run_module.run(cfg, run_dir)


def test_a_resume_after_the_model_folders_weights_changed_is_refused(assets, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "model"
    shutil.copytree(assets["base"], folder, symlinks=False)
    run_dir = tmp_path / "run"
    cfg = compose_run(*overrides(assets, "dataset.num_prompts=1"))
    cfg.model.path = str(folder)
    run_module.run(cfg, run_dir)
    weights = load_file(str(folder / "model.safetensors"))
    save_file({name: 1.5 * tensor for name, tensor in weights.items()}, str(folder / "model.safetensors"))
    cfg = compose_run(*overrides(assets, "dataset.num_prompts=2", "run.resume=true"))
    cfg.model.path = str(folder)
    with pytest.raises(ConfigError):
        run_module.run(cfg, run_dir)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_an_interrupted_hf_run_resumed_writes_the_uninterrupted_chains(assets, tmp_path, monkeypatch, dtype):
    """Ctrl-C during the second chain, then run.resume=true: the same chains, calls and complete summary."""
    extra = (f"engine.dtype={dtype}", "traversal=bfs", "run.chains_per_prompt=2")
    reference = run_here(tmp_path / "reference", assets, *extra)
    sample = run_module.sample_chain
    started = []

    def interrupted(*args, **kwargs):
        started.append(1)
        if len(started) == 2:
            raise KeyboardInterrupt
        return sample(*args, **kwargs)

    monkeypatch.setattr(run_module, "sample_chain", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_here(tmp_path / "run", assets, *extra)
    assert len(read_jsonl(tmp_path / "run" / "chains.jsonl")) == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["complete"] is False
    monkeypatch.setattr(run_module, "sample_chain", sample)
    resumed = run_here(tmp_path / "run", assets, *extra, "run.resume=true")
    want, got = chains(tmp_path / "reference"), chains(tmp_path / "run")
    assert got.keys() == want.keys() and len(got) == 4
    for key in want:
        assert got[key]["tokens"] == want[key]["tokens"] and got[key]["accepts"] == want[key]["accepts"]
        assert got[key]["log_accepts"] == want[key]["log_accepts"]  # same process, same threads: the same bits
    assert resumed["complete"] and resumed["model_calls"] == reference["model_calls"]
    assert resumed["engine_calls"] == reference["engine_calls"]


def test_two_hf_engines_in_one_process_give_the_same_answers_and_close_alone(assets):
    from presto.engines.base import SuffixRequest

    request = [SuffixRequest(tuple(range(1, 9)), 6, 0.5, 7, (1.0,))]
    first = build_engine({"name": "hf", "dtype": "float64"}, {"path": str(assets["base"])})
    second = build_engine({"name": "hf", "dtype": "float64"}, {"path": str(assets["base"])})
    a, b = first.generate(request)[0], second.generate(request)[0]
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.logq_extra, b.logq_extra)
    first.close()
    with pytest.raises(RuntimeError, match="this hf engine is closed"):
        first.generate(request)
    np.testing.assert_array_equal(second.generate(request)[0].tokens, a.tokens)  # the other one still serves
    assert first.stats.calls == 1 and second.stats.calls == 2


# --- scripts ----------------------------------------------------------------------------------------------


def benchmark_args(assets, out: Path, *extra: str, model: str = "base") -> list[str]:
    return [
        *(o for o in overrides(assets, *extra, model=model) if not o.startswith("budget.n_pf=")),  # --n-pf 4
        "--n-pf",
        "4",
        "--samplers",
        "powermh",
        "entropycut",
        "--traversals",
        "bfs",
        "predictive",
        "--out",
        str(out),
    ]


def test_benchmark_on_hf_in_float64_finds_every_chain_identical(assets, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert call_script(load_script("benchmark"), *benchmark_args(assets, out)) == 0
    figures = json.loads(out.read_text())
    assert figures["complete"]
    rows = figures["rows"]
    assert {(r["sampler"], r["traversal"]) for r in rows} >= {("powermh", "bfs"), ("entropycut", "predictive")}
    for row in rows:
        assert row["identical_chains"] == 1.0 and row["same_path_chains"] == 1.0, row
        assert row["chains"] == 2 and row["model_calls"] > 0
    assert "WARNING" not in capsys.readouterr().err  # float64 is batch-invariant: nothing to warn about


def test_benchmark_refuses_a_prompt_past_the_positions_before_any_chain(assets, tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = benchmark_args(
        assets, out, "sampler.max_new_tokens=8", "sampler.block_size=4", "dataset.num_prompts=3", model="short"
    )
    status = call_script(load_script("benchmark"), *argv)
    captured = capsys.readouterr()
    assert status == 2
    assert "chain 0:" not in captured.out  # no chain ran before the refusal
    assert "prompt p2" in captured.err


def test_call_cost_on_hf_refuses_a_prompt_past_the_positions_with_one_line(assets, capsys):
    status = call_script(
        load_script("call_cost"),
        "engine=hf",
        f"model.path={assets['short']}",
        "engine.dtype=float64",
        "--rows",
        "1",
        "--tokens",
        "8",
        "--prompt-tokens",
        "60",
    )
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.count("\n") == 0 and "at most 64" in err, err
