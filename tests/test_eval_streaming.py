"""The evaluation reads trees.jsonl a record at a time (RunData.tree_digest), never whole.

A paper-scale run's trees.jsonl is GBs (a line of tens of KB per prefetch round), several
times that once parsed; the figures need only a few numbers per round, one float per scored
decision and the first chain's first rounds. These tests check that what they get is what
the whole parsed file gave, and that computing it holds far less than the file.
"""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest

from presto.eval import plots, runs
from presto.eval.runs import chain_progress, load_run
from presto.runner.outputs import read_jsonl
from tests.conftest import peak_bytes, run_cli, toy_args, write_toy_table

PANELS = 2


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """A PreSTO toy run over two blocks (2 prompts x 2 chains, n=8, B=4, K=5)."""
    root = tmp_path_factory.mktemp("streaming")
    table = write_toy_table(root / "table.json", vocab=6, seed=3)
    run_dir = root / "run"
    result = run_cli(*toy_args(table, run_dir, "traversal=bfs", "budget.n_pf=6", "seed=3", steps=5))
    assert result.returncode == 0, result.stderr
    return run_dir


def materialised(path):
    """The rounds of each chain as the evaluation used to get them: the whole file parsed, then
    grouped (a round logged twice counts once, with its later record)."""
    latest: dict = {}
    for tree in read_jsonl(path):
        latest.setdefault((tree["prompt_id"], tree["chain"]), {})[tree["round"]] = tree
    return {chain: [rounds[r] for r in sorted(rounds)] for chain, rounds in latest.items()}


def old_advance(run, record, by_chain):
    """Transitions per model call as chain_progress used to count them, from the parsed rounds."""
    advance = []
    for stage in range(run.blocks):
        advance.append(0)
        for t in by_chain.get((record["prompt_id"], record["chain"]), []):
            if t.get("stage") != stage:
                continue
            if t.get("model_call", True):
                advance.append(int(t["realized"]))
            else:
                advance[-1] += int(t["realized"])
    return advance


def scrambled(toy_run, dest, seed=0):
    """The toy run with its trees.jsonl shuffled, as a batched run interleaves chains, plus a few
    rounds logged twice (a resumed run) whose later record differs from the earlier one."""
    shutil.copytree(toy_run, dest)
    records = read_jsonl(toy_run / "trees.jsonl")
    rng = random.Random(seed)
    rng.shuffle(records)
    stale = []
    for tree in rng.sample(records, 4):
        earlier = json.loads(json.dumps(tree))
        earlier["stage"], earlier["realized"] = 7, 99
        for node in earlier["nodes"]:
            node["log_accept"], node["feasible"] = -0.5, True
        stale.append(earlier)
    lines = [json.dumps(t) + "\n" for t in stale + records]  # the earlier attempts come first
    (dest / "trees.jsonl").write_text("".join(lines))
    return dest


def check_digest(path, keep):
    """The digest agrees with the parsed file: rounds, A values (in order), first chain and its rounds."""
    digest = runs.digest_trees(path, keep)
    by_chain = materialised(path)
    assert list(digest.rounds) == list(by_chain)
    for chain, rounds in by_chain.items():
        expected = [(t.get("stage"), t.get("model_call", True), t.get("realized")) for t in rounds]
        assert [tuple(r) for r in digest.rounds[chain]] == expected, chain
    accept = plots.acceptance_probabilities([t for rounds in by_chain.values() for t in rounds])
    assert digest.acceptance.dtype == accept.dtype and np.array_equal(digest.acceptance, accept)
    first = sorted(by_chain)[0]
    assert digest.first_chain == first and digest.first_total == len(by_chain[first])
    assert digest.first_rounds() == by_chain[first][:keep]
    assert digest.first_rounds(2) == by_chain[first][: min(2, keep)]
    return digest, by_chain


@pytest.mark.parametrize("keep", [0, 1, PANELS, 1000])
def test_digest_equals_the_parsed_file(toy_run, keep):
    digest, by_chain = check_digest(toy_run / "trees.jsonl", keep)
    assert digest.acceptance.size > 0 and len(by_chain) == 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_digest_of_interleaved_chains_and_rounds_logged_twice(toy_run, tmp_path, seed):
    """Chains in any order (the smallest not first), rounds out of order, later records winning."""
    path = scrambled(toy_run, tmp_path / "run", seed) / "trees.jsonl"
    for keep in (0, 2, PANELS, 1000):
        check_digest(path, keep)


def test_damaged_lines_are_treated_as_read_jsonl_treats_them(toy_run, tmp_path, capsys):
    """A damaged line in the middle: skipped with one warning; a torn last line: ignored silently."""
    path = tmp_path / "trees.jsonl"
    lines = (toy_run / "trees.jsonl").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + '{"prompt_id": "to\n' + "".join(lines[3:]) + lines[0][:40])
    digest, _ = check_digest(path, PANELS)
    err = capsys.readouterr().err
    assert err.count("warning") == 2 and f"{path}: line 4 is not JSON; skipped" in err  # digest, then read_jsonl
    assert sum(len(r) for r in digest.rounds.values()) == len(lines)


def test_transition_traces_count_the_rounds_as_before(toy_run, tmp_path):
    for run_dir in (toy_run, scrambled(toy_run, tmp_path / "run")):
        run = load_run(run_dir)
        by_chain = materialised(run_dir / "trees.jsonl")
        traced = 0
        for record in run.answers.values():
            progress = chain_progress(run, record)
            advance = old_advance(run, record, by_chain)
            if len(advance) == len(record["call_times_s"]):
                np.testing.assert_array_equal(progress[0], np.cumsum(advance))
                traced += 1
            else:
                assert progress is None
        assert traced == len(run.answers)  # the stale records were replaced by the later ones


def test_figures_are_those_of_the_parsed_rounds(toy_run, tmp_path):
    """make_plots' subtree figure is byte for byte the figure of the first chain's parsed rounds."""
    run = load_run(scrambled(toy_run, tmp_path / "run"))
    written = {p.name: p for p in plots.make_plots([run], tmp_path / "figures", max_tree_panels=PANELS)}
    by_chain = materialised(run.path / "trees.jsonl")
    first = sorted(by_chain)[0]
    assert len(by_chain[first]) > PANELS  # the title says how many rounds it leaves out
    name = f"subtrees_00_{plots.slug(run.label)}.png"
    expected = plots.plot_subtrees(
        by_chain[first],
        tmp_path / "expected.png",
        max_panels=PANELS,
        title=f"{run.label}: prefetched subtrees of {first[0]} chain {first[1]}",
        blocks=run.blocks,
    )
    assert written[name].read_bytes() == expected.read_bytes()
    # Without the block count in summary.json, whether the chain spans blocks comes from all its rounds.
    rounds = by_chain[first]
    assert any(t.get("stage") for t in rounds) and not any(t.get("stage") for t in rounds[:1])
    shown = plots.plot_subtrees(rounds[:1], tmp_path / "a.png", max_panels=1, total=len(rounds), later_blocks=True)
    whole = plots.plot_subtrees(rounds, tmp_path / "b.png", max_panels=1)
    assert shown.read_bytes() == whole.read_bytes()


def test_a_larger_panel_count_reads_the_file_again_a_smaller_one_does_not(toy_run):
    run = load_run(toy_run)
    digest = run.tree_digest()
    assert digest.first_rounds() == [] and run.tree_digest(0) is digest
    more = run.tree_digest(2)
    assert more is not digest and len(more.first_rounds()) == 2
    assert run.tree_digest(1) is more and run.tree_digest() is more


def inflated(toy_run, dest, size):
    """The toy run plus many rounds of other chains, until its trees.jsonl holds ``size`` bytes."""
    shutil.copytree(toy_run, dest)
    records = read_jsonl(toy_run / "trees.jsonl")
    path = dest / "trees.jsonl"
    written, i = path.stat().st_size, 0
    with path.open("a") as out:
        while written < size:
            tree = records[i % len(records)]
            written += out.write(json.dumps({**tree, "prompt_id": f"long/{i % 8}", "round": i // 8}) + "\n")
            i += 1
    return dest


def test_figure_inputs_hold_far_less_than_the_file(toy_run, tmp_path, monkeypatch):
    """What the figures read of a trees.jsonl of many rounds takes a fraction of the file.

    Parsed whole, the records took about twice the file. The figures themselves cost the same
    whatever the file's size (a panel per drawn round), so make_plots is measured against the
    same figures of the small run, with matplotlib imported and warmed up on it beforehand.
    """
    monkeypatch.setattr(plots, "_save", lambda fig, path: path)  # built, not rendered
    plots.make_plots([load_run(toy_run)], tmp_path / "warm", max_tree_panels=1)
    run_dir = inflated(toy_run, tmp_path / "long", 4_000_000)
    size = (run_dir / "trees.jsonl").stat().st_size
    run = load_run(run_dir)
    trace, peak = peak_bytes(lambda: plots.transition_trace(run))
    assert peak < size / 5
    assert trace is not None  # the toy run's own chains are traced

    def figures(run_dir):
        run = load_run(run_dir)
        written, peak = peak_bytes(lambda: plots.make_plots([run], tmp_path / "figures", max_tree_panels=1))
        assert {p.name for p in written} == {
            f"subtrees_00_{plots.slug(run.label)}.png",
            "transition_traces.png",
            "epsilon_certainty.png",
        }
        return peak

    assert figures(run_dir) - figures(toy_run) < size / 5
