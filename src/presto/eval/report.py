"""Markdown reports: speedup tables, quality equivalence (TOST) and figures for a set of runs.

``build_report`` turns a multirun directory (or any set of run directories) into one
markdown file: per sampler and setting, a table of every run's chain progress
(transitions per call), cost (time per call, summed call time), speedup over the
sequential run of the same setting with its decomposition, accuracy and quality; the
paired TOST of each PreSTO run against that sequential run with a pooled test per
sampler; the test-time baselines' time and memory; and the figures of presto.eval.plots.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from presto.eval.runs import (
    QUALITY_STATS,
    Comparison,
    RunData,
    compare,
    nearest_sequential,
    pairing_note,
    pool,
    sequential_baseline,
)
from presto.eval.tost import DEFAULT_LEVEL, DEFAULT_MARGIN_SD, PooledResult, interval_percent

# The paper's eq. (20) and its decomposition, in one line each for compare_runs and the report:
# users read "call reduction" as the plain ratio of calls and the increase as the ratio of the
# runs' pooled time per call; both are ratios of per-chain means instead.
SPEEDUP_DEFINITION = (
    "speedup = mean call time per chain, A / B (eq. 20); time/call increase = mean of each chain's "
    "time per call, B / A (not a ratio of pooled time_per_call_s); call reduction = speedup × increase, "
    "so it can differ from the plain ratio of mean calls (calls A/B)."
)
REPORT_SPEEDUP_DEFINITION = (
    "Speedup = the sequential run's mean summed model-call time per chain / this run's (eq. 20); "
    "time/call increase = mean of each chain's time per call, this run's / the sequential's (not the "
    "ratio of the time/call column, which pools all calls); call reduction = speedup × increase, so it "
    "can differ from the plain ratio of mean calls, shown beside it (calls seq/run)."
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
    values = [r[key] for r in run.chains if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def tost_rows(
    comparisons: Sequence[Comparison],
    stats: Sequence[str] = QUALITY_STATS,
    name: Callable[[Comparison], str] | None = None,
) -> list[list[Any]]:
    """One row per comparison and statistic, named by ``name`` (default: the variant's label)."""
    name = name or (lambda c: c.variant.label)
    rows = []
    for c in comparisons:
        for stat in stats:
            t = c.tost.get(stat)
            if t is None:
                rows.append([name(c), stat, None, None, None, None, None, None])
                continue
            ci = f"[{t.ci_low:.3g}, {t.ci_high:.3g}]"
            verdict = t.equivalent if t.defined else "undefined (baseline SD 0)"
            rows.append([name(c), stat, t.n, t.mean_diff, ci, t.margin, t.p_eq, verdict])
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
    return ("statistic", "pairs pooled", "pooled diff (SD units)", ci, "margin (SD)", "p_eq", "equivalent")


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
        short = pairing_note(c)
        if short:
            notes.append(f"- note: {short}")
        if any(c.unpaired):
            notes.append(
                f"- note: {c.unpaired[0]} chains of {c.baseline.path} and {c.unpaired[1]} of {c.variant.path} "
                "have no partner (other prompts or chain counts) and are left out"
            )
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
            lines.append("No statistic can be pooled: no pair has a TOST with a baseline spread (SD > 0).")
    return lines


def _setting_titles(groups: Sequence[Sequence[RunData]], max_keys: int = 4) -> list[str]:
    """One heading per setting; settings whose headings would read alike name the keys that differ."""
    titles = [_setting_title(g[0]) for g in groups]
    alike: dict[str, list[int]] = {}
    for i, title in enumerate(titles):
        alike.setdefault(title, []).append(i)
    for members in alike.values():
        if len(members) < 2:
            continue
        values = {i: groups[i][0].setting_values() for i in members}
        keys = sorted(k for k in set().union(*values.values()) if len({repr(v.get(k)) for v in values.values()}) > 1)
        for i in members:
            shown = [f"{k.removeprefix('summary.')}={values[i].get(k)!r}" for k in keys[:max_keys]]
            shown += ["…"] if len(keys) > max_keys else []
            titles[i] += f" [{', '.join(shown)}]"
    return titles


def _setting_title(run: RunData) -> str:
    s = run.summary
    where = ", ".join(str(v) for v in (run._select("dataset.name"), run._select("model.path")) if v)
    return (
        f"{s.get('sampler')} — α={_fmt(s.get('alpha'))}, τ={_fmt(s.get('tau'))}, n={s.get('max_new_tokens')}, "
        f"B={s.get('block_size')}, K={s.get('steps')}" + (f" ({where})" if where else "")
    )


def _chains(run: RunData) -> Any:
    """The summary's chain count, as 'H of E (incomplete)' for a run known to be incomplete."""
    if run.complete is False:
        expected = run.expected_chains
        return f"{run.chains_held}{'' if expected is None else f' of {expected}'} (incomplete)"
    return run.summary.get("chains")


def _run_order(run: RunData) -> tuple:
    """Sequential first, then by traversal and budget."""
    return (not run.is_sequential, str(run.summary.get("traversal")), run.summary.get("n_pf") or 0)


def build_report(
    runs: Sequence[RunData],
    out_path: Path,
    *,
    title: str = "PreSTO report",
    figures: bool = True,
    margin_sd: float = DEFAULT_MARGIN_SD,
    level: float = DEFAULT_LEVEL,
) -> Path:
    """Write the markdown report (and its figures beside it, under ``figures/``)."""
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
            sp = comparison.speedup if comparison else None
            rows.append(
                [
                    s.get("traversal"),
                    s.get("n_pf"),
                    _chains(run),
                    s.get("transitions_per_call"),
                    s.get("time_per_call_s"),
                    _mean_chain(run, "call_time_s"),
                    1.0 if run.is_sequential else (sp.speedup if sp else None),
                    sp.call_reduction if sp else None,
                    sp.time_per_call_increase if sp else None,
                    sp.calls_ratio if sp else None,
                    s.get("acceptance_rate"),
                    s.get("accuracy"),
                    s.get("loglik_mean"),
                    s.get("confidence_mean"),
                    s.get("peak_kv_usage"),
                ]
            )
        lines += _table(
            (
                "traversal",
                "N_pf",
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

    if comparisons:
        lines += [
            "## Quality equivalence (paired TOST vs the sequential run)",
            "",
            f"Per prompt (its chains averaged), as in the paper; margin δ = {margin_sd} baseline SDs; "
            f"equivalent when p_eq < {level}. Each variant is pooled over its settings (independent "
            "baselines; a baseline enters once).",
            "",
        ]
        for label, items in comparisons.items():
            rows = tost_rows(items, name=lambda c: titles[c.variant.setting()])
            lines += [f"### {label}", "", *_table(("setting", *tost_header(level)[1:]), rows), ""]
            pooled = {stat: pool(items, stat, margin_sd=margin_sd, level=level) for stat in QUALITY_STATS}
            if len(items) > 1 and any(pooled.values()):
                lines += [
                    "Pooled over its settings (fixed effect):",
                    "",
                    *_table(pooled_header(level), pooled_rows(pooled)),
                ]
                lines.append("")

    if baseline_runs:
        lines += [
            "## Test-time baselines",
            "",
            "Time is summed model-call time per prompt (answer). Log-likelihood and confidence are "
            "averaged over each answer up to its EOS, whereas MH chains run (and are averaged over) the "
            "full horizon n, so compare those two columns within a table, not across them.",
            "",
        ]
        rows = []
        for run in baseline_runs:
            s = run.summary
            size = run.config.get("sampler", {}) if run.config else {}
            width = size.get("num_samples") or size.get("num_particles")
            rows.append(
                [
                    s.get("sampler"),
                    width,
                    s.get("chains"),
                    _mean_chain(run, "call_time_s"),
                    _mean_chain(run, "wall_time_s"),
                    _mean_chain(run, "model_calls"),
                    s.get("peak_kv_usage"),
                    s.get("accuracy"),
                    s.get("loglik_mean"),
                    s.get("confidence_mean"),
                ]
            )
        lines += _table(
            (
                "sampler",
                "N or P",
                "answers",
                "call time/answer (s)",
                "wall time/answer (s)",
                "calls/answer",
                "peak KV",
                "accuracy",
                "loglik",
                "confidence",
            ),
            rows,
        )
        lines.append("")

    if figures:
        from presto.eval.plots import make_plots

        written = make_plots(runs, out_path.parent / "figures")
        if written:
            lines += ["## Figures", ""]
            for path in written:
                rel = path.relative_to(out_path.parent)
                lines += [f"![{path.stem}]({rel.as_posix()})", ""]
    out_path.write_text("\n".join(lines) + "\n")
    return out_path
