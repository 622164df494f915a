"""The report names each run, reads one set of chains per row, keeps its figures apart, and says why a TOST is missing.

- replicates of one setting (another seed, the same run repeated) are rows that name their run,
  in the speed table and in the TOST table;
- a row's figures all cover the chains chains.jsonl holds, not a summary.json written for fewer
  (a resumed run killed or still running);
- two reports written into one folder keep their own figures;
- a run without finished chains does not empty the prompts the others share (Case Study 8);
- a TOST that cannot be run (fewer than two paired units) says how many pairs there are and why.

The runs are written by hand (summary.json + chains.jsonl, no config.yaml), so each case
changes exactly one thing.
"""

from __future__ import annotations

import json
from pathlib import Path

from presto.eval.report import build_report
from presto.eval.runs import load_run, load_runs
from tests.conftest import call_script, load_script

compare_runs = load_script("compare_runs")

SUMMARY = {"sampler": "powermh", "alpha": 4.0, "tau": 0.25, "max_new_tokens": 8, "block_size": 4, "steps": 6}
LOGLIK = [-1.0, -1.4, -0.7, -2.0, -1.1, -0.9]
NOISE = [0.001, -0.002, 0.0015, -0.001, 0.002, 0.0]


def record(prompt: str, chain: int, calls: int, seconds: float, seed: int = 1, **extra) -> dict:
    return {
        "prompt_id": prompt,
        "chain": chain,
        "seed": seed,
        "model_calls": calls,
        "call_time_s": seconds,
        "transitions": 12,
        **extra,
    }


def write_run(path: Path, traversal: str, records: list[dict], **summary) -> Path:
    """A run directory; its summary.json holds the setting and what ``summary`` adds (no figures of its own)."""
    path.mkdir(parents=True)
    n_pf = None if traversal == "none" else 1 if traversal == "sequential" else 4
    prompts = len({r["prompt_id"] for r in records})
    full = {**SUMMARY, "traversal": traversal, "n_pf": n_pf, "prompts": prompts, "chains": len(records), **summary}
    (path / "summary.json").write_text(json.dumps({k: v for k, v in full.items() if v is not None}))
    (path / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def loglik_run(path: Path, traversal: str, calls: int, shift: float, seed: int) -> Path:
    """Six prompts, one chain each, loglik (and confidence) = LOGLIK + shift + a little noise."""
    records = [
        record(f"p{i}", 0, calls, calls * 0.5, seed, loglik=v + shift + e, confidence=v + shift + e)
        for i, (v, e) in enumerate(zip(LOGLIK, NOISE, strict=True))
    ]
    return write_run(path, traversal, records, seed=seed)


def table(lines: list[str]) -> list[dict[str, str]]:
    """The rows of the markdown table that starts at ``lines[0]``, cells by column."""
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.split("|")[1:-1]])
    return [dict(zip(rows[0], row, strict=True)) for row in rows[2:]]  # past the header and its rule


def speed_rows(text: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    return table(lines[next(i for i, line in enumerate(lines) if line.startswith("| traversal |")) :])


def tost_rows(text: str, label: str) -> list[dict[str, str]]:
    lines = text[text.index("## Quality equivalence") :].splitlines()
    start = lines.index(f"### {label}")
    return table(lines[next(i for i in range(start, len(lines)) if lines[i].startswith("| ")) :])


# --- 1. replicates of one setting name their run ------------------------------------------


def test_replicates_of_one_setting_name_their_run_in_the_speed_and_tost_tables(tmp_path):
    """seq (seed 1), bfs (seed 1) and bfs2 (seed 2) of one setting: bfs2 is shifted, so only
    bfs is equivalent; each row must say which run it is."""
    loglik_run(tmp_path / "multi" / "seq", "sequential", 12, 0.0, seed=1)
    loglik_run(tmp_path / "multi" / "bfs", "bfs", 6, 0.0, seed=1)
    loglik_run(tmp_path / "multi" / "bfs2", "bfs", 4, 0.5, seed=2)
    runs = load_runs([tmp_path / "multi"])
    text = build_report(runs, tmp_path / "report.md", figures=False).read_text()
    speed = {row["run"]: row for row in speed_rows(text)}
    assert set(speed) == {"seq", "bfs", "bfs2"}
    assert speed["bfs"]["speedup"] == "2" and speed["bfs2"]["speedup"] == "3"  # 6 s / 3 s and 6 s / 2 s per chain
    verdicts = {
        row["run"]: row["equivalent"] for row in tost_rows(text, "powermh/bfs@4") if row["statistic"] == "loglik"
    }
    assert verdicts == {"bfs": "yes", "bfs2": "no"}


# --- 2. a row's figures cover the chains held ---------------------------------------------


def test_a_stale_summary_does_not_mix_into_the_row_of_the_chains_held(tmp_path):
    """A resumed run killed after chains.jsonl gained two chains: summary.json still describes
    the first two. Every column but peak KV (the engine's, which only the summary holds) is over
    the four chains held, and a note says which column is the summary's."""
    records = [
        record("p0", 0, 10, 1.0, accepts=[1] * 12, correct=True, loglik=-1.0, confidence=-0.5),
        record("p1", 0, 14, 2.0, accepts=[1, 0] * 6, correct=False, loglik=-2.0, confidence=-0.7),
        record("p2", 0, 20, 6.0, accepts=[0] * 12, correct=False, loglik=-3.5, confidence=-1.9),
        record("p3", 0, 16, 3.0, accepts=[1, 1, 0] * 4, correct=None, loglik=-0.25, confidence=-0.1),
    ]
    stale = {  # the figures of the first two chains, as the earlier session wrote them
        "chains": 2,
        "transitions_per_call": 24 / 24,
        "time_per_call_s": 3.0 / 24,
        "acceptance_rate": 18 / 24,
        "accuracy": 0.5,
        "loglik_mean": -1.5,
        "confidence_mean": -0.6,
        "peak_kv_usage": 0.25,
        "expected_chains": 6,
        "complete": False,
    }
    run = load_run(write_run(tmp_path / "res_kill", "sequential", records, **stale))
    text = build_report([run], tmp_path / "report.md", figures=False).read_text()
    [row] = speed_rows(text)
    calls, seconds = 10 + 14 + 20 + 16, 1.0 + 2.0 + 6.0 + 3.0
    expected = {
        "chains": "4 of 6 (incomplete)",
        "transitions/call": f"{48 / calls:.4g}",
        "time/call (s)": f"{seconds / calls:.4g}",
        "call time/chain (s)": f"{seconds / 4:.4g}",
        "acceptance": f"{(12 + 6 + 0 + 8) / 48:.4g}",
        "accuracy": f"{1 / 3:.4g}",  # the ungraded chain left out
        "loglik": f"{(-1.0 - 2.0 - 3.5 - 0.25) / 4:.4g}",
        "confidence": f"{(-0.5 - 0.7 - 1.9 - 0.1) / 4:.4g}",
        "peak KV": "0.25",
    }
    assert {k: row[k] for k in expected} == expected
    [note] = [line for line in text.splitlines() if "summary.json" in line and "peak KV" in line]
    assert "2 chains" in note and "4" in note


def test_a_summary_that_agrees_with_its_chains_adds_no_note(tmp_path):
    records = [record(f"p{i}", 0, 10, 1.0, accepts=[1] * 12, loglik=-1.0, confidence=-0.5) for i in range(3)]
    run = load_run(write_run(tmp_path / "seq", "sequential", records, peak_kv_usage=0.5))
    text = build_report([run], tmp_path / "report.md", figures=False).read_text()
    [row] = speed_rows(text)
    assert row["acceptance"] == "1" and row["peak KV"] == "0.5" and row["chains"] == "3"
    assert not [line for line in text.splitlines() if "peak KV" in line and line.startswith("- note:")]


# --- 3. reports in one folder keep their own figures --------------------------------------


def speed_pair(root: Path, bfs_seconds: float) -> list:
    """A sequential and a BFS run of one setting with per-call times: a transition trace and a scatter point."""
    seq = [record(f"p{i}", 0, 14, 14.0, call_times_s=[1.0] * 14) for i in range(3)]
    bfs = [record(f"p{i}", 0, 6, 6 * bfs_seconds, call_times_s=[bfs_seconds] * 6) for i in range(3)]
    write_run(root / "seq", "sequential", seq)
    write_run(root / "bfs", "bfs", bfs)
    return load_runs([root])


def figure_links(report: Path) -> list[Path]:
    links = [line[line.index("](") + 2 : -1] for line in report.read_text().splitlines() if line.startswith("![")]
    return [report.parent / link for link in links]


def test_two_reports_in_one_folder_keep_their_own_figures(tmp_path):
    a = build_report(speed_pair(tmp_path / "multi", 1.5), tmp_path / "r" / "a.md")
    links = figure_links(a)
    assert links and all(p.is_file() for p in links)
    before = {p: p.read_bytes() for p in links}
    b = build_report(speed_pair(tmp_path / "m3", 3.0), tmp_path / "r" / "b.md")
    assert figure_links(b) and set(figure_links(b)).isdisjoint(links)
    assert {p: p.read_bytes() for p in links if p.is_file()} == before  # none deleted, none redrawn
    # The default report keeps its figures where they always were.
    default = build_report(load_runs([tmp_path / "multi"]), tmp_path / "multi" / "report.md")
    assert {p.parent for p in figure_links(default)} == {tmp_path / "multi" / "figures"}


# --- 4. a run without chains does not empty the shared prompts ----------------------------


def test_a_run_without_chains_is_named_and_the_others_share_their_prompts(tmp_path):
    """seq at 0 chains; bfs and lowtemp share six prompts."""
    chains = [record(f"p{i}", 0, 6, 3.0, loglik=-1.0, wall_time_s=3.0) for i in range(6)]
    write_run(tmp_path / "edge" / "seq", "sequential", [], expected_chains=6, complete=False)
    write_run(tmp_path / "edge" / "bfs", "bfs", chains)
    write_run(tmp_path / "edge" / "lowtemp", "none", [dict(r, transitions=0) for r in chains], sampler="lowtemp")
    text = build_report(load_runs([tmp_path / "edge"]), tmp_path / "report.md", figures=False).read_text()
    section = text[text.index("## Case Study 8") :]
    assert "share no prompt" not in section
    assert "6 prompts" in section.split("\n### ")[1].splitlines()[0]
    [note] = [line for line in section.splitlines() if "no finished chains" in line]
    assert str(tmp_path / "edge" / "seq") in note
    assert str(tmp_path / "edge" / "bfs") not in note and str(tmp_path / "edge" / "lowtemp") not in note


# --- 5. a TOST that cannot be run says why ------------------------------------------------


def one_prompt_runs(tmp_path: Path, chains: int) -> tuple[Path, Path]:
    seq = [record("p0", c, 12, 6.0, loglik=-1.0 - 0.1 * c, confidence=-0.5 - 0.1 * c) for c in range(chains)]
    bfs = [record("p0", c, 6, 3.0, loglik=-1.01 - 0.1 * c, confidence=-0.49 - 0.1 * c) for c in range(chains)]
    return write_run(tmp_path / "seq", "sequential", seq), write_run(tmp_path / "bfs", "bfs", bfs)


def compare_tost_rows(capsys) -> dict[str, dict[str, str]]:
    out = capsys.readouterr().out
    lines = out[out.index("## Paired TOST") :].splitlines()
    return {
        row["statistic"]: row for row in table(lines[next(i for i, ln in enumerate(lines) if ln.startswith("| ")) :])
    }


def test_compare_runs_says_why_one_prompt_has_no_per_prompt_tost(tmp_path, capsys):
    seq, bfs = one_prompt_runs(tmp_path, chains=3)
    assert call_script(compare_runs, seq, bfs) == 0
    rows = compare_tost_rows(capsys)
    for stat in ("loglik", "confidence"):
        assert rows[stat]["pairs"] == "1"
        assert "at least two prompts" in rows[stat]["equivalent"] and "--unit chain" in rows[stat]["equivalent"]
    assert call_script(compare_runs, seq, bfs, "--unit", "chain") == 0  # the way out it names
    rows = compare_tost_rows(capsys)
    assert rows["loglik"]["pairs"] == "3" and rows["loglik"]["equivalent"] in ("yes", "no")


def test_compare_runs_says_why_one_chain_has_no_per_chain_tost(tmp_path, capsys):
    seq, bfs = one_prompt_runs(tmp_path, chains=1)
    assert call_script(compare_runs, seq, bfs, "--unit", "chain") == 0
    row = compare_tost_rows(capsys)["loglik"]
    assert row["pairs"] == "1" and "at least two paired chains" in row["equivalent"]


def test_the_report_says_why_a_one_prompt_setting_has_no_tost(tmp_path):
    seq, bfs = one_prompt_runs(tmp_path, chains=3)
    text = build_report([load_run(seq), load_run(bfs)], tmp_path / "report.md", figures=False).read_text()
    [row] = [r for r in tost_rows(text, "powermh/bfs@4") if r["statistic"] == "loglik"]
    assert row["pairs"] == "1" and "at least two prompts" in row["equivalent"]
