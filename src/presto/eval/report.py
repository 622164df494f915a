"""Markdown reports: speedup tables, quality equivalence (TOST) and figures for a set of runs.

``build_report`` turns a multirun directory (or any set of run directories) into one
markdown file: per sampler and setting, a table of every run's chain progress
(transitions per call), cost (time per call, summed call time), speedup over the
sequential run of the same setting with its decomposition, accuracy and quality; the
speedup over the shards of one setting (``dataset.shard`` jobs) pooled; the
paired TOST of each PreSTO run against that sequential run with a pooled test per
sampler; Case Study 8: per task (engine, model, dataset, α, n) the MH runs beside the test-time
baselines, per prompt over the prompts they share; and the figures of presto.eval.plots.
Every row names its run (its directory below the runs' common parent), so replicates of one
setting are told apart, and a row's figures are over the chains chains.jsonl holds.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from presto.config import describe_differences, differing_keys
from presto.eval.runs import (
    QUALITY_STATS,
    Comparison,
    RunData,
    case_study_groups,
    chain_summary,
    compare,
    nearest_sequential,
    pair_chains,
    pairing_note,
    pool,
    prompt_figures,
    sequential_baseline,
    speedup,
)
from presto.eval.tost import DEFAULT_LEVEL, DEFAULT_MARGIN_SD, PooledResult, interval_percent

# The paper's eq. (20) and its decomposition (App. D.2), in one line each for compare_runs and
# the report: users read "call reduction" as the plain ratio of calls and the increase as the
# ratio of the runs' pooled time per call; both are ratios of per-prompt means instead.
SPEEDUP_DEFINITION = (
    "speedup = mean call time per chain, A / B (eq. 20); time/call increase = mean over prompts of each "
    "prompt's time per call (its chains' call time / their calls), B / A (not a ratio of pooled "
    "time_per_call_s); call reduction = speedup × increase, so it can differ from the plain ratio of "
    "mean calls (calls A/B)."
)
REPORT_SPEEDUP_DEFINITION = (
    "Speedup = the sequential run's mean summed model-call time per chain / this run's (eq. 20); "
    "time/call increase = mean over prompts of each prompt's time per call (its chains' call time / "
    "their calls), this run's / the sequential's (not the ratio of the time/call column, which pools all "
    "calls); call reduction = speedup × increase, so it can differ from the plain ratio of mean calls, "
    "shown beside it (calls seq/run)."
)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return lines


def _mean_chain(run: RunData, key: str) -> float | None:
    """Mean of ``key`` over the run's chains, a chain recorded twice counting once (its later record)."""
    values = [r[key] for r in run.answers.values() if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def untested_reason(c: Comparison, stat: str, chain_option: str = "--unit chain") -> str:
    """Why ``stat`` of a comparison has no TOST: fewer than two paired units (``chain_option``:
    how the reader asks for a per-chain test)."""
    if not c.units.get(stat):
        return f"untested: no paired chains record {stat} on both sides"
    if c.unit == "prompt":
        return f"untested: the per-prompt test needs at least two prompts ({chain_option} pairs the chains instead)"
    return "untested: the test needs at least two paired chains"


def tost_rows(
    comparisons: Sequence[Comparison],
    stats: Sequence[str] = QUALITY_STATS,
    names: Callable[[Comparison], Sequence[Any]] | None = None,
    chain_option: str = "--unit chain",
) -> list[list[Any]]:
    """One row per comparison and statistic, led by the cells ``names`` gives (default: the
    variant's label). A statistic without a TOST shows its pairs and why (``untested_reason``)."""
    names = names or (lambda c: [c.variant.label])
    rows = []
    for c in comparisons:
        for stat in stats:
            t = c.tost.get(stat)
            if t is None:
                reason = untested_reason(c, stat, chain_option)
                rows.append([*names(c), stat, c.units.get(stat), None, None, None, None, reason])
                continue
            ci = f"[{t.ci_low:.3g}, {t.ci_high:.3g}]"
            verdict = t.equivalent if t.defined else "undefined (baseline SD 0)"
            rows.append([*names(c), stat, t.n, t.mean_diff, ci, t.margin, t.p_eq, verdict])
    return rows


def tost_header(level: float = DEFAULT_LEVEL) -> tuple[str, ...]:
    ci = f"{interval_percent(level)} CI"
    return ("variant", "statistic", "pairs", "mean diff (B−A)", ci, "margin δ", "p_eq", "equivalent")


def pooled_rows(pooled: Mapping[str, PooledResult | None]) -> list[list[Any]]:
    return [
        [stat, p.pairs, p.estimate, f"[{p.ci_low:.3g}, {p.ci_high:.3g}]", p.margin_sd, p.p_eq, p.equivalent]
        for stat, p in pooled.items()
        if p is not None
    ]


def pooled_header(level: float = DEFAULT_LEVEL) -> tuple[str, ...]:
    ci = f"{interval_percent(level)} CI"
    return ("statistic", "run pairs pooled", "pooled diff (SD units)", ci, "margin (SD)", "p_eq", "equivalent")


def pairing_notes(c: Comparison, *, seeds: bool = False) -> list[str]:
    """What a comparison's figures leave out or pair loosely: chains without a partner, fewer
    pairs than the runs configured, prompts whose paired chains saw other prompt tokens, and
    (``seeds``, where no seed-matched column says it) pairs drawn with other seeds."""
    notes = []
    short = pairing_note(c)
    if short:
        notes.append(short)
    if any(c.unpaired):
        notes.append(
            f"{c.unpaired[0]} chains of {c.baseline.path} and {c.unpaired[1]} of {c.variant.path} "
            "have no partner (other prompts or chain counts) and are left out"
        )
    if c.prompts_differ:
        shown = ", ".join(c.prompts_differ[:5]) + (", …" if len(c.prompts_differ) > 5 else "")
        notes.append(
            f"{len(c.prompts_differ)} paired prompts ({shown}) are other tokens in {c.baseline.path} than in "
            f"{c.variant.path} (prompt_sha differs: another tokenizer, chat template or seed-shuffled "
            "choices), so their pairs compare different prompts"
        )
    if seeds and not c.seed_matched:
        notes.append(
            f"{c.variant.path} is not seed-matched with {c.baseline.path} (other seeds, or none recorded): "
            "its chains pair with independent draws, not with the same random inputs"
        )
    return notes


def comparison_lines(
    comparisons: Sequence[Comparison],
    pooled: Mapping[str, PooledResult | None],
    level: float = DEFAULT_LEVEL,
    stats: Sequence[str] | None = None,
) -> list[str]:
    """Plain-text/markdown lines for scripts/compare_runs.py (``stats``: default, those the comparisons tested)."""
    if stats is None:
        stats = list(dict.fromkeys(stat for c in comparisons for stat in c.tost))
    lines: list[str] = []
    rows = []
    for c in comparisons:
        s = c.speedup
        rows.append(
            [
                c.baseline.label,
                c.variant.label,
                s.units,
                "yes" if c.seed_matched else "no",
                s.speedup,
                s.call_reduction,
                s.time_per_call_increase,
                s.calls_ratio,
                s.transitions_per_call_baseline,
                s.transitions_per_call_variant,
            ]
        )
    lines += ["## Speedup (A = baseline, B = variant)", ""]
    lines += _table(
        (
            "A",
            "B",
            "paired chains",
            "seed-matched",
            "speedup",
            "call reduction",
            "time/call increase",
            "calls A/B",
            "transitions/call A",
            "transitions/call B",
        ),
        rows,
    )
    lines += ["", SPEEDUP_DEFINITION]
    notes = []
    for c in comparisons:
        notes += [f"- note: {note}" for note in pairing_notes(c)]
        if c.differences:
            notes.append(f"- note: {c.baseline.path} and {c.variant.path} differ in {'; '.join(c.differences)}")
    if notes:
        lines += ["", *notes]
    lines += ["", f"## Paired TOST (B − A; equivalent when p_eq < {level:g})", ""]
    for c in comparisons:
        lines.append(f"- {c.baseline.path} vs {c.variant.path}")
    lines += ["", *_table(tost_header(level), tost_rows(comparisons, stats))]
    if pooled:
        lines += ["", "## Pooled fixed-effect TOST over all pairs", ""]
        if any(v is not None for v in pooled.values()):
            lines += _table(pooled_header(level), pooled_rows(pooled))
        else:
            lines.append(
                "No statistic can be pooled: fewer than two pairs that share no run have a TOST with a "
                "baseline spread (SD > 0); each pair's own TOST above is the answer."
            )
    return lines


def _titles_told_apart(
    groups: Sequence[Sequence[RunData]],
    title: Callable[[RunData], str],
    values: Callable[[RunData], dict[str, Any]],
    max_keys: int = 4,
) -> list[str]:
    """One heading per group (``title`` of its first run); headings that would read alike
    name the keys on which their ``values`` differ (at most ``max_keys``, then "…")."""
    titles = [title(g[0]) for g in groups]
    alike: dict[str, list[int]] = {}
    for i, text in enumerate(titles):
        alike.setdefault(text, []).append(i)
    for members in alike.values():
        if len(members) < 2:
            continue
        shown_values = {i: values(groups[i][0]) for i in members}
        keys = differing_keys(list(shown_values.values()))
        for i in members:
            shown = [f"{k.removeprefix('summary.')}={shown_values[i].get(k)!r}" for k in keys[:max_keys]]
            shown += ["…"] if len(keys) > max_keys else []
            titles[i] += f" [{', '.join(shown)}]"
    return titles


def _setting_titles(groups: Sequence[Sequence[RunData]]) -> list[str]:
    """One heading per setting; settings whose headings would read alike name the keys that differ."""
    return _titles_told_apart(groups, _setting_title, RunData.setting_values)


def _setting_title(run: RunData) -> str:
    s = run.summary
    where = ", ".join(str(v) for v in (run._select("dataset.name"), run._select("model.path")) if v)
    return (
        f"{s.get('sampler')} — α={_fmt(s.get('alpha'))}, τ={_fmt(s.get('tau'))}, n={s.get('max_new_tokens')}, "
        f"B={s.get('block_size')}, K={s.get('steps')}" + (f" ({where})" if where else "")
    )


def shards_pooled_lines(comparisons: Sequence[Comparison], names: Mapping[Path, str]) -> list[str]:
    """The speedup over every paired chain of the shards of one setting (``dataset.shard=I/N`` jobs).

    Each shard's PreSTO run is compared with its own shard's sequential run above; here the
    pairs of the shards that agree in everything else (setting but the shard, traversal,
    N_pf, seed) are pooled into one eq. (20) figure, as one run over all their prompts would
    give. Of two comparisons of the same shard only the first counts (a chain pairs once).
    """
    groups: dict[tuple, dict[str, Comparison]] = {}
    for c in comparisons:
        values = c.variant.setting_values()
        shard = values.pop("dataset.shard", None)
        if shard is None:
            continue
        # A shard's prompt count is its own share; the shards of one split share the configured count and N.
        values["dataset.num_prompts"] = c.variant._select("dataset.num_prompts")
        values["shards"] = str(shard).partition("/")[2]
        key = (tuple(sorted((k, repr(v)) for k, v in values.items())), c.variant.label, c.variant.summary.get("seed"))
        groups.setdefault(key, {}).setdefault(str(shard), c)
    rows = []
    for by_shard in groups.values():
        if len(by_shard) < 2:
            continue
        shards = sorted(by_shard, key=_shard_order)
        items = [by_shard[shard] for shard in shards]
        sp = speedup([pair for c in items for pair in pair_chains(c.baseline, c.variant)])
        first = items[0].variant
        rows.append(
            [
                first.label,
                _setting_title(first),
                first.summary.get("seed"),
                ", ".join(f"{shard} ({names[c.variant.path]})" for shard, c in zip(shards, items, strict=True)),
                sp.units,
                sp.transitions_per_call_baseline,
                sp.transitions_per_call_variant,
                sp.speedup,
                sp.call_reduction,
                sp.time_per_call_increase,
            ]
        )
    if not rows:
        return []
    header = (
        "run",
        "setting",
        "seed",
        "shards (run)",
        "paired chains",
        "transitions/call seq",
        "transitions/call",
        "speedup",
        "call reduction",
        "time/call increase",
    )
    intro = (
        "The shards of one setting (dataset.shard=I/N) pooled: eq. (20) over every paired chain of the shards "
        "listed, each paired within its own shard."
    )
    return ["## Shards pooled", "", intro, "", *_table(header, rows), ""]


def _shard_order(shard: str) -> tuple:
    index, _, count = shard.partition("/")
    return (int(count), int(index)) if index.isdigit() and count.isdigit() else (0, 0, shard)


def accuracy_note(path: Path, graded: int, answers: int) -> str | None:
    """A line when an accuracy covers only some answers: the others could not be graded (correct=null)."""
    if not 0 < graded < answers:
        return None
    return (
        f"{path}: accuracy is over {graded} of {answers} chains; {answers - graded} could not be graded "
        "(correct=null: code execution disabled, a sandbox error, an unparsable reference) and are left out"
    )


def _graded(run: RunData) -> int:
    return sum(isinstance(r.get("correct"), bool | int | float) for r in run.answers.values())


def _chains(run: RunData) -> Any:
    """The chains held (chains.jsonl), as 'H of E (incomplete)' for a run known to be incomplete."""
    if run.complete is False:
        expected = run.expected_chains
        return f"{run.chains_held}{'' if expected is None else f' of {expected}'} (incomplete)"
    return run.chains_held


def stale_summary_note(run: RunData) -> str | None:
    """A line when summary.json counts other chains than chains.jsonl holds and the speed table
    shows a figure only the summary has (peak KV: the engine's, not a chain's)."""
    counted = run.summary.get("chains")
    if run.summary.get("peak_kv_usage") is None or not isinstance(counted, int) or counted == run.chains_held:
        return None
    return (
        f"{run.path}: summary.json was written for {counted} chains and chains.jsonl holds {run.chains_held} "
        f"(a resumed run killed or still running?): peak KV is the summary's, over its {counted} chains; "
        f"the other columns are over the {run.chains_held} chains held"
    )


def _run_order(run: RunData) -> tuple:
    """Sequential first, then by traversal and budget."""
    return (not run.is_sequential, str(run.summary.get("traversal")), run.summary.get("n_pf") or 0)


CASE_STUDY_INTRO = (
    "Case Study 8: the MH runs (sequential and PreSTO) beside the test-time baselines of the same task "
    "(engine, model, dataset, α, n). Per prompt = the summed figure of a prompt's answers (chains), "
    "averaged over the prompts; call time is the time inside model calls, wall time the answers' own; "
    "× lowtemp = call time per prompt over the (first) lowtemp row's; peak KV is the whole run's."
)
NEAR_TASK_KEYS = 2
"""A baseline without an MH run of its task names the MH run whose task differs in at most this many keys."""


def _method(run: RunData) -> str:
    if run.is_test_time_baseline:
        return str(run.sampler_name)
    traversal = run.summary.get("traversal")
    return f"{run.sampler_name} ({traversal})" if run.is_sequential else f"PreSTO-{run.sampler_name} ({traversal})"


def _options(run: RunData) -> str:
    """The options that size a run: K, B and N_pf for MH; N for best_of_n; P and B for power_smc."""
    s = run.summary
    sampler = run.config.get("sampler", {}) if run.config else {}

    def option(key: str) -> Any:
        value = sampler.get(key)
        if value is None:  # a chain record carries it where config.yaml is absent
            value = next((r[key] for r in run.chains if r.get(key) is not None), None)
        return value

    if run.sampler_name == "lowtemp":
        return "one answer"
    if run.sampler_name == "best_of_n":
        return f"N={_fmt(option('num_samples'))}, score={sampler.get('score', 'logq')}"
    if run.sampler_name == "power_smc":
        return f"P={_fmt(option('num_particles'))}, B={_fmt(s.get('block_size'))}"
    text = f"K={_fmt(s.get('steps'))}, B={_fmt(s.get('block_size'))}"
    return text if run.is_sequential else f"{text}, N_pf={_fmt(s.get('n_pf'))}"


def _case_study_order(run: RunData) -> tuple:
    """MH runs first (sequential, then by traversal and budget), then lowtemp, best_of_n, power_smc by size."""
    baselines = ("lowtemp", "best_of_n", "power_smc")
    if not run.is_test_time_baseline:
        return (0, *_run_order(run))
    size = run._select("sampler.num_samples") or run._select("sampler.num_particles") or 0
    return (1, baselines.index(run.sampler_name) if run.sampler_name in baselines else 9, str(size))


def _task_title(run: RunData) -> str:
    values = run.task_values()
    where = [f"{k.split('.')[0]}={values[k]}" for k in ("engine.name", "model.path", "dataset.name") if values.get(k)]
    if not where:
        where = ["engine, model and dataset unknown (no config.yaml)"]
    return f"{', '.join(where)}; α={_fmt(values.get('sampler.alpha'))}, n={values.get('sampler.max_new_tokens')}"


def _task_titles(groups: Sequence[Sequence[RunData]]) -> list[str]:
    """One heading per task; tasks whose headings would read alike name the keys that differ."""
    return _titles_told_apart(groups, _task_title, RunData.task_values)


def _run_names(runs: Sequence[RunData]) -> dict[Path, str]:
    """Each run's directory relative to the runs' common parent (its own name when alone)."""
    paths = [run.path.resolve() for run in runs]
    common = Path(os.path.commonpath(paths)) if len(paths) > 1 else paths[0].parent
    return {run.path: (p.relative_to(common).as_posix() or p.name) for run, p in zip(runs, paths, strict=True)}


def case_study_lines(runs: Sequence[RunData]) -> list[str]:
    """Case Study 8 tables: per task holding a test-time baseline, one row per run (MH and baselines)."""
    groups = case_study_groups(runs)
    if not groups:
        return []
    mh_runs = [r for r in runs if not r.is_test_time_baseline]
    lines = ["## Case Study 8: MH runs against test-time baselines", "", CASE_STUDY_INTRO, ""]
    for group, title in zip(groups, _task_titles(groups), strict=True):
        group = sorted(group, key=_case_study_order)
        # A run without a finished chain (killed at its start, say) shares no prompt with any run:
        # it is named instead of emptying the prompts the others share.
        held = [run for run in group if run.answers]
        prompt_sets = [run.prompt_ids for run in held]
        shared = set.intersection(*prompt_sets) if prompt_sets else set()
        notes = []
        if len(held) < len(group):
            empty = ", ".join(str(run.path) for run in group if not run.answers)
            notes.append(
                f"- note: no finished chains (chains.jsonl holds none) in {empty}: an empty row, left out of "
                "the prompts the runs share"
            )
        prompts = None
        if len({frozenset(p) for p in prompt_sets}) > 1:
            others = [(run, p) for run, p in zip(held, prompt_sets, strict=True) if p != shared]
            counts = "; ".join(f"{run.path}: {len(p)}" for run, p in others)
            if shared:
                prompts = shared
                notes.append(
                    f"- note: the runs did not all run the same prompts: {len(shared)} prompts are shared by all "
                    f"(other prompt counts: {counts}), and the per-prompt figures and accuracy are over those "
                    f"{len(shared)} shared prompts only"
                )
            else:
                notes.append(
                    f"- note: the runs share no prompt ({counts}), so each row is over its own prompts "
                    "and the rows do not compare like with like"
                )
        figures = [prompt_figures(run, prompts) for run in group]
        heading_prompts = len(shared) if shared else max((len(p) for p in prompt_sets), default=0)
        lines += [f"### {title}, {heading_prompts} prompts", ""]
        names = _run_names(group)
        reference = next((f for run, f in zip(group, figures, strict=True) if run.sampler_name == "lowtemp"), None)
        rows = []
        for run, fig in zip(group, figures, strict=True):
            relative = None
            if reference is not None and reference.call_time and fig.call_time is not None:
                relative = fig.call_time / reference.call_time
            rows.append(
                [
                    _method(run),
                    names[run.path],
                    _options(run),
                    run.summary.get("tau"),
                    fig.answers,
                    fig.call_time,
                    fig.wall_time,
                    fig.model_calls,
                    relative,
                    fig.accuracy,
                    run.summary.get("peak_kv_usage"),
                    run.summary.get("max_new_tokens"),
                ]
            )
        lines += _table(
            (
                "method",
                "run",
                "options",
                "τ",
                "answers",
                "call time/prompt (s)",
                "wall time/prompt (s)",
                "calls/prompt",
                "× lowtemp",
                "accuracy",
                "peak KV",
                "n",
            ),
            rows,
        )
        has_mh = any(not run.is_test_time_baseline for run in group)
        n = group[0].task_values().get("sampler.max_new_tokens")
        if has_mh:
            baselines = ", ".join(dict.fromkeys(str(r.sampler_name) for r in group if r.is_test_time_baseline))
            notes.insert(
                0,
                f"- note: horizons differ: the MH runs always generate n={n} tokens (fixed horizon, EOS ignored), "
                f"whereas the baselines ({baselines}) stop each answer at its first EOS, so they generate up to "
                f"n={n} tokens",
            )
        else:
            near = []
            values = group[0].task_values()
            for run in mh_runs:
                differences = describe_differences(run.task_values(), values, " vs ")
                if 0 < len(differences) <= NEAR_TASK_KEYS:
                    near.append((len(differences), str(run.path), differences))
            hint = ""
            if near:
                _, path, differences = min(near)
                hint = f"; the MH run {path} differs in {'; '.join(differences)} (its vs the baselines')"
            notes.append(f"- note: no MH run of this task here, so the baselines stand alone{hint}")
        notes += [
            f"- note: {note}"
            for run, f in zip(group, figures, strict=True)
            if (note := accuracy_note(run.path, f.graded, f.answers))
        ]
        per_prompt = {run.path: f.answers / f.prompts for run, f in zip(group, figures, strict=True) if f.prompts}
        if len(set(per_prompt.values())) > 1:
            counts = ", ".join(f"{_method(r)}: {_fmt(per_prompt[r.path])}" for r in group if r.path in per_prompt)
            notes.append(
                f"- note: the runs draw different numbers of answers per prompt ({counts}); "
                "per-prompt figures sum a prompt's answers"
            )
        lines += ["", *notes, ""]
    return lines


def figures_dir(out_path: Path) -> Path:
    """Where a report's figures go: ``figures/`` beside ``report.md`` (the default report), else
    ``STEM_figures/`` beside it. Each report has its own folder, since ``make_plots`` keeps a
    folder to the figures of its latest call: two reports sharing one would delete or redraw
    each other's."""
    out_path = Path(out_path)
    return out_path.parent / ("figures" if out_path.stem == "report" else f"{out_path.stem}_figures")


def build_report(
    runs: Sequence[RunData],
    out_path: Path,
    *,
    title: str = "PreSTO report",
    figures: bool = True,
    margin_sd: float = DEFAULT_MARGIN_SD,
    level: float = DEFAULT_LEVEL,
) -> Path:
    """Write the markdown report (and its figures beside it, under :func:`figures_dir`)."""
    from presto.baselines import BASELINES

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", f"{len(runs)} run directories.", ""]
    incomplete = [note for note in (run.incomplete_note() for run in runs) if note]
    if incomplete:
        lines += ["**Warning: incomplete runs.**", "", *(f"- {note}" for note in incomplete), ""]
    mh_runs = [r for r in runs if r.summary.get("sampler") not in BASELINES]
    baseline_runs = [r for r in runs if r.summary.get("sampler") in BASELINES]

    groups: dict[tuple, list[RunData]] = {}
    for run in mh_runs:
        groups.setdefault(run.setting(), []).append(run)
    comparisons: dict[str, list[Comparison]] = {}
    if groups:
        lines += ["## Speed per sampler and setting", ""]
        lines += [REPORT_SPEEDUP_DEFINITION, ""]
    titles = dict(zip(groups, _setting_titles(list(groups.values())), strict=True))
    names = _run_names(runs)  # each row names its run: one setting can hold several (seeds, repeats)
    for setting, setting_runs in groups.items():
        setting_runs.sort(key=_run_order)
        lines += [f"### {titles[setting]}", ""]
        rows = []
        notes = []
        for run in setting_runs:
            s = run.summary
            baseline = sequential_baseline(run, runs)
            comparison = None
            if baseline is not None:
                try:
                    comparison = compare(baseline, run, margin_sd=margin_sd, level=level)
                    comparisons.setdefault(run.label, []).append(comparison)
                    # The speedup and TOST cover the paired chains only; the other columns all of them.
                    notes += [f"- note: {note}" for note in pairing_notes(comparison, seeds=True)]
                except ValueError as err:
                    notes.append(f"- note: {run.path} not compared with {baseline.path}: {err}")
            elif not run.is_sequential and s.get("traversal") not in (None, "none"):
                near = nearest_sequential(run, runs)
                hint = ""
                if near is not None:
                    hint = (
                        f"; the sequential run {near[0].path} differs only in {'; '.join(near[1])} "
                        "(this run's vs its; scripts/compare_runs.py --allow-different-settings compares them)"
                    )
                notes.append(f"- note: {run.path}: no sequential run of this setting here, so no speedup or TOST{hint}")
            # Every column but peak KV is over the chains held (a stale summary.json, from a
            # resumed run killed or still running, counts fewer); peak KV only the summary has.
            held = chain_summary(run)
            accuracy = accuracy_note(run.path, _graded(run), len(run.answers))
            if accuracy and held["accuracy"] is not None:
                notes.append(f"- note: {accuracy}")
            stale = stale_summary_note(run)
            if stale:
                notes.append(f"- note: {stale}")
            sp = comparison.speedup if comparison else None
            rows.append(
                [
                    s.get("traversal"),
                    s.get("n_pf"),
                    names[run.path],
                    _chains(run),
                    held["transitions_per_call"],
                    held["time_per_call_s"],
                    _mean_chain(run, "call_time_s"),
                    1.0 if run.is_sequential else (sp.speedup if sp else None),
                    sp.call_reduction if sp else None,
                    sp.time_per_call_increase if sp else None,
                    sp.calls_ratio if sp else None,
                    held["acceptance_rate"],
                    held["accuracy"],
                    held["loglik_mean"],
                    held["confidence_mean"],
                    s.get("peak_kv_usage"),
                ]
            )
        lines += _table(
            (
                "traversal",
                "N_pf",
                "run",
                "chains",
                "transitions/call",
                "time/call (s)",
                "call time/chain (s)",
                "speedup",
                "call reduction",
                "time/call increase",
                "calls seq/run",
                "acceptance",
                "accuracy",
                "loglik",
                "confidence",
                "peak KV",
            ),
            rows,
        )
        lines += ["", *notes, ""] if notes else [""]

    lines += shards_pooled_lines([c for items in comparisons.values() for c in items], names)

    if comparisons:
        lines += [
            "## Quality equivalence (paired TOST vs the sequential run)",
            "",
            f"Per prompt (its chains averaged), as in the paper; margin δ = {margin_sd} baseline SDs; "
            f"equivalent when p_eq < {level}. Each variant is pooled over its settings (independent "
            "pairs: a run enters once).",
            "",
        ]

        # Replicates of one setting (other seeds, a repeated run) are told apart by their runs.
        def row_names(c: Comparison) -> list[str]:
            return [titles[c.variant.setting()], names[c.variant.path], names[c.baseline.path]]

        for label, items in comparisons.items():
            rows = tost_rows(items, names=row_names, chain_option="scripts/compare_runs.py --unit chain")
            header = ("setting", "run", "sequential run", *tost_header(level)[1:])
            lines += [f"### {label}", "", *_table(header, rows), ""]
            pooled = {stat: pool(items, stat, margin_sd=margin_sd, level=level) for stat in QUALITY_STATS}
            if len(items) > 1 and any(pooled.values()):
                lines += [
                    "Pooled over its settings (fixed effect):",
                    "",
                    *_table(pooled_header(level), pooled_rows(pooled)),
                ]
                lines.append("")
            elif len(items) > 1:  # a lone pair's paired t-TOST is its answer; a pooled z-test could contradict it
                lines += [
                    "Not pooled: fewer than two of these comparisons have distinct sequential baselines and a "
                    "TOST with a baseline spread (SD > 0).",
                    "",
                ]

    if baseline_runs:
        lines += case_study_lines(runs)

    if figures:
        from presto.eval.plots import make_plots

        try:
            written = make_plots(runs, figures_dir(out_path))
        except Exception as err:  # a figure that fails must not take the tables with it
            written = []
            lines += ["## Figures", "", f"Figures could not be drawn: {type(err).__name__}: {err}", ""]
            print(f"warning: figures could not be drawn: {type(err).__name__}: {err}", file=sys.stderr)
        if written:
            lines += ["## Figures", ""]
            for path in written:
                rel = path.relative_to(out_path.parent)
                lines += [f"![{path.stem}]({rel.as_posix()})", ""]
    from presto.runner.outputs import write_text_atomic

    write_text_atomic(out_path, "\n".join(lines) + "\n")  # an interrupted rewrite keeps the last report whole
    return out_path
