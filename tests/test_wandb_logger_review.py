"""Review of logger=wandb with a stand-in wandb module (no network, no W&B service): how a run's
end reaches W&B, credentials of a self-hosted server, an online start that fails, the sync hint
of a resumed offline run, and the cost of keeping wandb_indices.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from presto.config import ConfigError
from presto.eval.wandb_logger import INDICES_FILE, WandbLogger, has_credentials, resolve_mode
from presto.runner.logging import exit_status
from presto.tasks import GradingError
from tests.conftest import compose_run, toy_overrides


class FakeRun:
    """What the logger uses of a wandb Run; records what it was sent in ``calls``."""

    def __init__(self, calls: list, kw: dict) -> None:
        self.calls, self.kw = calls, kw
        self.id = kw.get("id") or "sweep001"
        kind = "offline-run" if kw["mode"] == "offline" else "run"
        stamp = f"2025010{len([c for c in calls if c[0] == 'init'])}_000000"
        folder = Path(kw["dir"]) / "wandb" / f"{kind}-{stamp}-{self.id}"
        (folder / "files").mkdir(parents=True, exist_ok=True)
        self.dir = str(folder / "files")
        self.step = 0
        self.summary: dict = {}
        self.config = types.SimpleNamespace(update=lambda *a, **k: None)
        self.log_error: Exception | None = None

    def define_metric(self, *args, **kwargs) -> None:
        pass

    def log(self, metrics, step=None) -> None:
        if self.log_error is not None:
            raise self.log_error
        self.calls.append(("log", step, sorted(metrics)))

    def save(self, *args, **kwargs) -> None:
        pass

    def finish(self, exit_code=None, quiet=None) -> None:
        self.calls.append(("finish", exit_code))


@pytest.fixture
def fake_wandb(monkeypatch, tmp_path):
    """A stand-in ``wandb`` module: ``fake.calls`` records init (its keywords), log and finish;
    ``fake.online_error`` makes an online ``wandb.init`` raise it."""
    fake = types.ModuleType("wandb")
    fake.calls = []
    fake.online_error = None
    fake.runs = []

    def init(**kw):
        fake.calls.append(("init", kw))
        if kw["mode"] == "online" and fake.online_error is not None:
            raise fake.online_error
        fake.runs.append(FakeRun(fake.calls, kw))
        return fake.runs[-1]

    fake.init = init
    fake.teardown = lambda exit_code=None: fake.calls.append(("teardown",))
    fake.Settings = lambda **kw: kw
    fake.Image = lambda path: path
    monkeypatch.setitem(sys.modules, "wandb", fake)
    for name in ("WANDB_RUN_ID", "WANDB_DIR", "WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no netrc, no wandb settings
    return fake


def finishes(fake) -> list:
    return [call[1] for call in fake.calls if call[0] == "finish"]


def logger_in(run_dir: Path, **cfg) -> WandbLogger:
    run_dir.mkdir(parents=True, exist_ok=True)
    return WandbLogger({"name": "wandb", "mode": "offline", "log_plots": False, **cfg}, {"seed": 0}, run_dir)


# --- 1. how the run ended -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (None, 0),
        (KeyboardInterrupt("SIGTERM"), 143),
        (KeyboardInterrupt(), 130),
        (RuntimeError("engine died"), 1),
        (GradingError("the grader is broken"), 2),
        (ConfigError("sampler.alpha must be > 0"), 2),
    ],
)
def test_the_exit_status_of_a_run_is_the_clis(error, code):
    assert exit_status(error) == code


@pytest.mark.parametrize("code", [143, 130, 1])
def test_finish_sends_the_runs_exit_status(fake_wandb, tmp_path, code):
    """Told by the runner's finally or its early-failure handler how the run ended."""
    logger = logger_in(tmp_path / "run")
    logger.finish(code)
    assert finishes(fake_wandb) == [code]


@pytest.mark.parametrize(("complete", "code"), [(True, 0), (False, 1)])
def test_an_incomplete_summary_marks_the_wandb_run_failed(fake_wandb, tmp_path, complete, code):
    logger = logger_in(tmp_path / "run")
    logger.on_summary({"complete": complete, "chains": 1}, tmp_path / "run")
    logger.finish()
    assert finishes(fake_wandb) == [code]


def toy_run_config(toy_table, *extra):
    return compose_run(*toy_overrides(toy_table), "logger=wandb", "logger.mode=offline", "run.progress=false", *extra)


def test_an_interrupted_run_ends_its_wandb_run_as_killed(fake_wandb, toy_table, tmp_path, monkeypatch):
    import presto.runner.run as runner

    original, started = runner.sample_chain, []

    def interrupted_at_the_second_chain(*args, **kwargs):
        started.append(1)
        if len(started) == 2:
            raise KeyboardInterrupt("SIGTERM")  # what presto.cli makes of a SIGTERM
        return original(*args, **kwargs)

    monkeypatch.setattr(runner, "sample_chain", interrupted_at_the_second_chain)
    with pytest.raises(KeyboardInterrupt):
        runner.run(toy_run_config(toy_table, "logger.log_plots=false"), tmp_path / "run")
    assert finishes(fake_wandb) == [143]


def test_a_sigterm_while_the_plots_are_drawn_still_finishes_the_wandb_run(fake_wandb, toy_table, tmp_path, monkeypatch):
    """The figures are drawn after the summary is written; a SIGTERM there must not skip finish."""
    import presto.eval.plots as plots
    import presto.runner.run as runner

    def terminated(*args, **kwargs):
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(plots, "make_plots", terminated)
    with pytest.raises(KeyboardInterrupt):
        runner.run(toy_run_config(toy_table), tmp_path / "run")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["complete"] is True
    assert finishes(fake_wandb) == [143]


def test_a_completed_run_finishes_its_wandb_run_with_success(fake_wandb, toy_table, tmp_path):
    import presto.runner.run as runner

    runner.run(toy_run_config(toy_table, "logger.log_plots=false"), tmp_path / "run")
    assert finishes(fake_wandb) == [0]


# --- 2. credentials of a self-hosted server ------------------------------------------------


def write_netrc(home: Path, machine: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / ".netrc").write_text(f"machine {machine}\n  login user\n  password k3y\n")
    (home / ".netrc").chmod(0o600)


def write_settings(folder: Path, **values: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings").write_text("[default]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))


@pytest.fixture
def bare_cwd(tmp_path, monkeypatch):
    """A working directory without a ./wandb/settings of its own."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_wandb_login_host_credentials_make_it_online(tmp_path, bare_cwd):
    """`wandb login --host URL` keeps the URL in ~/.config/wandb/settings and the key under its host in netrc."""
    home = tmp_path / "home"
    write_netrc(home, "wandb.example.org")
    write_settings(home / ".config" / "wandb", base_url="https://wandb.example.org")
    assert has_credentials({"HOME": str(home)})
    assert resolve_mode(None, {"HOME": str(home)}) == "online"
    # $WANDB_BASE_URL comes first, as in wandb: a key for another host does not count.
    assert not has_credentials({"HOME": str(home), "WANDB_BASE_URL": "https://other.example.org"})


def test_a_settings_file_base_url_without_its_key_is_offline(tmp_path, bare_cwd):
    home = tmp_path / "home"
    write_netrc(home, "api.wandb.ai")  # a key for the public cloud, not for the configured server
    write_settings(home / ".config" / "wandb", base_url="https://wandb.example.org")
    assert not has_credentials({"HOME": str(home)})


def test_a_netrc_entry_with_the_servers_port_counts(tmp_path, bare_cwd):
    """wandb writes the netrc machine as host:port for a server on a port (a local server)."""
    home = tmp_path / "home"
    write_netrc(home, "localhost:8080")
    write_settings(home / ".config" / "wandb", base_url="http://localhost:8080")
    assert has_credentials({"HOME": str(home)})


def test_wandb_config_dir_and_the_workspace_settings_are_read(tmp_path, bare_cwd):
    home, config = tmp_path / "home", tmp_path / "config"
    write_netrc(home, "wandb.example.org")
    write_settings(config, base_url="https://wandb.example.org")
    assert has_credentials({"HOME": str(home), "WANDB_CONFIG_DIR": str(config)})
    # ./wandb/settings (`wandb init`) overrides the global file
    write_settings(bare_cwd / "wandb", base_url="https://elsewhere.example.org")
    assert not has_credentials({"HOME": str(home), "WANDB_CONFIG_DIR": str(config)})


def test_an_api_key_in_the_settings_files_counts(tmp_path, bare_cwd):
    home = tmp_path / "home"
    write_settings(home / ".config" / "wandb", base_url="https://wandb.example.org", api_key="k3y")
    assert has_credentials({"HOME": str(home)})


def test_an_unreadable_settings_file_falls_back_to_the_public_host(tmp_path, bare_cwd):
    home = tmp_path / "home"
    write_netrc(home, "api.wandb.ai")
    (home / ".config" / "wandb").mkdir(parents=True)
    (home / ".config" / "wandb" / "settings").write_text("not [an ini file\n = =\n")
    assert has_credentials({"HOME": str(home)})
    (home / ".config" / "wandb" / "settings").unlink()
    (home / ".config" / "wandb" / "settings").mkdir()  # a directory where the file should be
    assert has_credentials({"HOME": str(home)})


# --- 3. an online start that fails -----------------------------------------------------------


def test_an_online_start_that_fails_logs_offline_and_says_so_in_one_line(fake_wandb, tmp_path, capsys):
    fake_wandb.online_error = TimeoutError("Run initialization has timed out after 90.0 sec.\nPlease refer to docs")
    logger = logger_in(tmp_path / "run", mode="online", group="g")
    online, offline = [c[1] for c in fake_wandb.calls if c[0] == "init"]
    assert [c[0] for c in fake_wandb.calls[:3]] == ["init", "teardown", "init"]  # the failed run let go first
    assert (online["mode"], offline["mode"]) == ("online", "offline")
    for key in ("id", "name", "group", "config", "project", "resume"):
        assert offline[key] == online[key], key
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "offline" in err and "wandb sync" in err and "WANDB_INIT_TIMEOUT" in err and "WANDB_MODE=offline" in err
    assert "timed out" in err  # why
    logger.on_chain({"transitions": 2, "model_calls": 1, "accepts": [1]})
    assert [c for c in fake_wandb.calls if c[0] == "log"]  # the run goes on logging, offline


REAL_WANDB_RUN = """
import sys
from pathlib import Path
from presto.eval.wandb_logger import WandbLogger
logger = WandbLogger({"name": "wandb", "log_plots": False}, {"seed": 0}, Path(sys.argv[1]))
logger.on_chain({"transitions": 2, "model_calls": 1, "accepts": [1]})
logger.finish(143)  # as the runner tells it of a SIGTERM
"""


def test_with_real_wandb_an_unreachable_server_gives_an_offline_run_that_says_how_it_ended(tmp_path):
    """wandb itself: after a failed online start its service still holds the run id, and an offline
    run's transaction log keeps the exit code finish sent."""
    pytest.importorskip("wandb")
    from tests.eval.test_wandb_review import records

    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        {
            "HOME": str(tmp_path),
            "WANDB_API_KEY": "a" * 40,
            "WANDB_BASE_URL": "http://127.0.0.1:9",  # nothing listens there: refused, no network needed
            "WANDB_INIT_TIMEOUT": "2",
            "WANDB_SILENT": "true",
            "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
        }
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", REAL_WANDB_RUN, str(run_dir)], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "could not start online" in warnings[0], result.stderr
    assert "W&B logging stopped" not in result.stderr
    (log,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    kinds = [r.WhichOneof("record_type") for r in records(log)]
    assert "history" in kinds
    assert [r.exit.exit_code for r in records(log) if r.WhichOneof("record_type") == "exit"] == [143]


def test_a_logging_error_is_reported_on_one_line(fake_wandb, tmp_path, capsys):
    logger = logger_in(tmp_path / "run")
    capsys.readouterr()
    fake_wandb.runs[-1].log_error = RuntimeError("upload failed\n  details\n  more")
    logger.on_chain({"transitions": 2, "model_calls": 1, "accepts": [1]})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "W&B logging stopped" in err and "upload failed" in err, err


# --- 4. the sync hint of a resumed offline run -----------------------------------------------


def test_the_sync_hint_names_every_offline_part_of_the_run_oldest_first(fake_wandb, tmp_path, capsys):
    run_dir, wandb_home = tmp_path / "run", tmp_path / "wandb_home"
    run_dir.mkdir()
    (run_dir / "wandb_run_id").write_text("abcd1234\n")
    earlier = wandb_home / "wandb" / "offline-run-20240101_000000-abcd1234"
    other = wandb_home / "wandb" / "offline-run-20240102_000000-ffff0000"  # another run's
    earlier.mkdir(parents=True)
    other.mkdir()
    logger = logger_in(run_dir, dir=str(wandb_home))
    current = Path(fake_wandb.runs[-1].dir).parent
    logger.finish()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"`wandb sync {earlier} {current}`" in last, last
    assert str(other) not in last


# --- 5. the cost of wandb_indices.json --------------------------------------------------------


def test_each_row_replaces_the_indices_file_atomically_without_fsync(fake_wandb, tmp_path, monkeypatch):
    logger = logger_in(tmp_path / "run")
    synced, replaced = [], []
    real_replace = os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))

    def replace(src, dst):
        replaced.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    for _ in range(3):
        logger.on_round({"realized": 2, "call_time_s": 0.1, "requests": 4})
    path = tmp_path / "run" / INDICES_FILE
    assert synced == []
    assert replaced == [(path.with_name(INDICES_FILE + ".tmp"), path)] * 3
    assert json.loads(path.read_text()) == {"rounds": 3, "chains": 0, "step": 3}
    assert not path.with_name(INDICES_FILE + ".tmp").exists()


def test_write_text_atomic_is_durable_unless_told_otherwise(tmp_path, monkeypatch):
    from presto.runner.outputs import write_text_atomic

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    write_text_atomic(tmp_path / "a", "one")
    assert len(synced) == 2 and (tmp_path / "a").read_text() == "one"  # the file, then its folder (the rename)
    write_text_atomic(tmp_path / "a", "two", durable=False)
    assert len(synced) == 2 and (tmp_path / "a").read_text() == "two"
    assert not (tmp_path / "a.tmp").exists()


def test_a_teardown_that_exits_stops_w_and_b_logging_not_the_run(fake_wandb, tmp_path, capsys):
    """wandb.teardown() calls sys.exit when its service ended badly: the run must not end there."""
    fake_wandb.online_error = TimeoutError("Run initialization has timed out")

    def exits(exit_code=None):
        raise SystemExit(1)

    fake_wandb.teardown = exits
    logger = logger_in(tmp_path / "run", mode="online")
    assert "W&B logging stopped" in capsys.readouterr().err
    logger.on_chain({"transitions": 2, "model_calls": 1, "accepts": [1]})
    logger.finish(0)
