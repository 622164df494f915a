"""dataset.shard=I/N: a job runs every N-th of the run's prompts, and shards add up to the whole run."""

from __future__ import annotations

import json

import pytest

from presto.config import ConfigError, Shard, parse_shard, validate
from tests.conftest import compose_run, one_error_line, run_cli, toy_overrides


def chains(run_dir) -> dict[tuple[str, int], list[int]]:
    records = [json.loads(line) for line in (run_dir / "chains.jsonl").read_text().splitlines()]
    return {(r["prompt_id"], r["chain"]): r["tokens"] for r in records}


def run_toy(table, run_dir, *extra: str) -> dict:
    from presto.runner.run import run

    cfg = compose_run(*toy_overrides(table), "run.progress=false", *extra)
    return run(cfg, run_dir)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("0/4", Shard(0, 4)), ("3/4", Shard(3, 4)), (" 1 / 2 ", Shard(1, 2)), ("0/1", Shard(0, 1))],
)
def test_a_shard_is_null_or_i_of_n(value, expected):
    assert parse_shard(value) == expected


@pytest.mark.parametrize(
    "value", ["abc", 1, True, "4/4", "5/4", "-1/4", "1/0", "0/0", "1/2/3", "1/", "/2", "1.0/2", "²/4"]
)
def test_anything_else_is_one_config_error(value):
    with pytest.raises(ConfigError, match=r"^dataset\.shard"):
        parse_shard(value)


@pytest.mark.parametrize("total", [0, 1, 2, 5, 7, 20, 23])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 8])
def test_shards_split_the_prompts_into_disjoint_strided_parts_of_near_equal_size(total, count):
    prompts = [f"p{i}" for i in range(total)]
    parts = [Shard(index, count).select(prompts) for index in range(count)]
    assert sorted(p for part in parts for p in part) == sorted(prompts)  # every prompt, once
    assert [len(part) for part in parts] == [Shard(index, count).size(total) for index in range(count)]
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    for index, part in enumerate(parts):  # positions index, index + count, ...
        assert part == [prompts[i] for i in range(total) if i % count == index]


def test_a_shard_without_prompts_is_refused_before_anything_loads(toy_table):
    cfg = compose_run(*toy_overrides(toy_table), "dataset.shard=2/3")  # 2 prompts: shard 2 holds none
    with pytest.raises(ConfigError, match=r"dataset\.shard=2/3 holds no prompt of dataset\.num_prompts=2"):
        validate(cfg)


def test_the_cli_names_a_bad_shard_in_one_line_and_fails(toy_table, tmp_path):
    result = run_cli(*toy_overrides(toy_table), f"hydra.run.dir={tmp_path / 'run'}", "dataset.shard=one/4")
    assert result.returncode != 0
    assert one_error_line(result.stderr).startswith("error: dataset.shard must be I/N")
    assert not (tmp_path / "run" / "chains.jsonl").exists()


def test_the_shards_chains_are_the_whole_runs_chains_token_for_token(toy_table, tmp_path):
    extra = ("dataset.num_prompts=5", "traversal=bfs", "budget.n_pf=3")
    whole = run_toy(toy_table, tmp_path / "whole", *extra)
    merged: dict = {}
    for index in range(3):
        summary = run_toy(toy_table, tmp_path / f"shard{index}", *extra, f"dataset.shard={index}/3")
        part = chains(tmp_path / f"shard{index}")
        assert sorted({prompt for prompt, _ in part}) == [f"toy/{i}" for i in range(index, 5, 3)]
        assert summary["expected_chains"] == 2 * len(range(index, 5, 3)) and summary["complete"] is True
        assert not merged.keys() & part.keys()
        merged.update(part)
    assert whole["chains"] == 10
    assert merged == chains(tmp_path / "whole")


def test_a_shards_directory_resumes_as_that_shard_only(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    run_toy(toy_table, run_dir, "dataset.num_prompts=4", "dataset.shard=1/2")
    first = chains(run_dir)
    assert {prompt for prompt, _ in first} == {"toy/1", "toy/3"}
    summary = run_toy(toy_table, run_dir, "dataset.num_prompts=4", "dataset.shard=1/2", "run.resume=true")
    assert summary["chains"] == 4 and chains(run_dir) == first  # nothing run twice
    with pytest.raises(ConfigError, match=r"made with another config: dataset\.shard \('1/2' -> '0/2'\)"):
        run_toy(toy_table, run_dir, "dataset.num_prompts=4", "dataset.shard=0/2", "run.resume=true")


def test_resuming_a_shard_counts_its_own_prompts(toy_table, tmp_path):
    from presto.runner.run import check_resumed_extent

    settings = validate(compose_run(*toy_overrides(toy_table), "dataset.num_prompts=7", "dataset.shard=0/3"))
    held = [{"prompt_id": f"toy/{i}", "chain": 0} for i in (0, 3, 6)]
    check_resumed_extent(settings, held, tmp_path)  # shard 0 of 7 prompts holds 3
    with pytest.raises(ConfigError, match="chains of 4 prompts"):
        check_resumed_extent(settings, [*held, {"prompt_id": "toy/9", "chain": 0}], tmp_path)


def test_a_dataset_shorter_than_num_prompts_is_sharded_by_what_it_holds(toy_table, tmp_path):
    from presto.runner.run import load_task_and_engine

    rows = [{"problem": f"What is {i} + 1?", "answer": str(i + 1), "unique_id": f"q{i}"} for i in range(2)]
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    overrides = ("engine=toy", "model=toy", f"engine.table={toy_table}", "dataset=math500", f"dataset.path={path}")
    cfg = compose_run(*overrides, "dataset.num_prompts=5", "dataset.shard=3/4")  # 5 configured, 2 in the file
    with pytest.raises(ConfigError, match=r"dataset\.shard=3/4 holds none of the 2 prompts of dataset math500"):
        load_task_and_engine(cfg, validate(cfg))
    cfg = compose_run(*overrides, "dataset.num_prompts=5", "dataset.shard=1/4")
    _task, problems, engine = load_task_and_engine(cfg, validate(cfg))
    engine.close()
    assert [p.problem_id for p in problems] == ["q1"] and problems[0].index == 1  # keyed by its row, not its place


def _run_dir(tmp_path, name: str, shard: object) -> object:
    from omegaconf import OmegaConf

    run_dir = tmp_path / name
    run_dir.mkdir()
    cfg = OmegaConf.to_container(compose_run("engine=toy", "model=toy", "engine.table=t.json", "dataset=toy"))
    if shard == "absent":  # a run made before dataset.shard existed
        del cfg["dataset"]["shard"]
    else:
        cfg["dataset"]["shard"] = shard
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (run_dir / "summary.json").write_text(json.dumps({"sampler": "powermh", "traversal": "bfs"}))
    (run_dir / "trees.jsonl").write_text("")
    (run_dir / "chains.jsonl").write_text("")
    return run_dir


def test_shards_of_one_setting_pool_their_trees_for_training(tmp_path):
    from presto.predictor.data import run_info

    settings = {
        run_info(_run_dir(tmp_path, name, shard) / "trees.jsonl").setting
        for name, shard in [("a", "0/2"), ("b", "1/2"), ("c", None), ("d", "absent")]
    }
    assert len(settings) == 1 and None not in settings


def test_a_report_pairs_a_shard_only_with_runs_of_the_same_shard(tmp_path):
    from presto.eval.runs import load_run

    runs = {
        name: load_run(_run_dir(tmp_path, name, shard))
        for name, shard in [("a", "0/2"), ("b", "1/2"), ("c", None), ("d", "absent")]
    }
    assert runs["a"].setting() != runs["b"].setting()
    assert runs["a"].setting_values()["dataset.shard"] == "0/2"
    # A run made before dataset.shard existed is the same setting as one with dataset.shard=null.
    assert runs["c"].setting() == runs["d"].setting() and "dataset.shard" not in runs["c"].setting_values()


def _report_rows(path, heading: str) -> list[list[str]]:
    lines = path.read_text().splitlines()
    if heading not in lines:
        return []
    table = []
    for line in lines[lines.index(heading) + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith("| run |"):
            table.append([cell.strip() for cell in line.strip("|").split("|")])
    return table


def test_the_report_pools_the_shards_speedup_over_all_their_paired_chains(toy_table, tmp_path):
    from presto.eval.report import build_report
    from presto.eval.runs import load_run

    runs = {}
    for traversal in ("sequential", "bfs"):
        for index in range(2):
            run_dir = tmp_path / f"{traversal}{index}"
            run_toy(toy_table, run_dir, "dataset.num_prompts=3", f"traversal={traversal}", f"dataset.shard={index}/2")
            runs[traversal, index] = load_run(run_dir)
    report = build_report(list(runs.values()), tmp_path / "report.md", figures=False)
    (row,) = _report_rows(report, "## Shards pooled")
    assert row[0] == "powermh/bfs@20" and row[3] == "0/2 (bfs0), 1/2 (bfs1)"

    def mean_call_time(traversal: str) -> float:
        records = [r for index in range(2) for r in runs[traversal, index].chains]
        return sum(r["call_time_s"] for r in records) / len(records)

    assert int(row[4]) == 6  # 3 prompts x 2 chains, over both shards
    assert float(row[7]) == pytest.approx(mean_call_time("sequential") / mean_call_time("bfs"), rel=1e-3)
    # One shard alone, or shards of other seeds, pool nothing.
    report = build_report([runs["sequential", 0], runs["bfs", 0]], tmp_path / "one.md", figures=False)
    assert _report_rows(report, "## Shards pooled") == []
