"""What the Hydra entry points share: resolvers, early checks, and clean error exits.

Users get one line for a mistake, never a traceback: unknown group options are caught
before Hydra composes, value errors before any model or dataset is loaded, and a run
directory that Hydra created for a run that never started is removed again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

_SPECIAL_PREFIXES = ("choice(", "range(", "glob(", "interval(", "tag(", "sort(", "shuffle(")


def register_resolvers(project_root: Path) -> None:
    OmegaConf.register_new_resolver("project_root", lambda: str(project_root), replace=True)
    # The default run directory is <time>-<pid>: two jobs started in the same second (parallel
    # sweep agents) must not share one directory. Cached, as Hydra's ${now:} is: the cache lives in
    # the config, which Hydra copies into each job of a sweep (load_sweep_config), so a launcher's
    # worker processes (joblib, submitit) write under the sweep directory the launcher resolved and
    # announced, not each under one named by its own pid.
    OmegaConf.register_new_resolver("pid", lambda: str(os.getpid()), use_cache=True, replace=True)


def fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def check_group_choices(conf_dir: Path, overrides: list[str]) -> None:
    """Reject `group=option` overrides whose option file does not exist, naming the choices."""
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir() and p.name not in ("hydra", "sweeps")}
    for override in overrides:
        if override.startswith("-") or "=" not in override:
            continue
        key, _, value = override.lstrip("+~").partition("=")
        if key.split(".", 1)[0] == "sweeps" and (conf_dir / "sweeps").is_dir():
            fail(_not_a_group(conf_dir / "sweeps", key, value))
        if key not in groups or value.startswith(_SPECIAL_PREFIXES) or value == "":
            continue
        options = sorted(p.stem for p in (conf_dir / key).glob("*.yaml"))
        if value == "null":  # Hydra 1.3 refuses a null group override with a traceback (ValueError), even launcher's
            fail(f"{key}=null is not an option; choose one of: {', '.join(options)} (~{key} drops the group)")
        for option in value.split(","):
            if option not in options:
                fail(f"{key}={option} is not an option; choose one of: {', '.join(options)}")


def _not_a_group(sweeps_dir: Path, key: str, value: str) -> str:
    """Why ``sweeps=NAME`` is no override: conf/sweeps/ holds W&B sweep files (Hydra's advice to add the
    group with ``+`` composes one into the run config, where its ``${env}`` fails with a traceback)."""
    files = sorted(p.stem for p in sweeps_dir.glob("*.yaml"))
    if value not in files:  # no such sweep file: name those there are, not one of them as if it were this one
        return (
            f"{key}={value}: conf/sweeps/ holds W&B sweep files ({', '.join(files) or 'none'}), not a config "
            "group; run one with `wandb sweep conf/sweeps/NAME.yaml`, or sweep with Hydra: -m KEY=V1,V2"
        )
    name = value
    hydra_form = ""
    with contextlib.suppress(Exception):  # the Hydra equivalent of a grid sweep file, where it reads as one
        sweep = OmegaConf.to_container(OmegaConf.load(sweeps_dir / f"{name}.yaml"))
        lists = [f"{k}={','.join(str(v) for v in spec['values'])}" for k, spec in sweep["parameters"].items()]
        # The overrides its command adds to every run (logger=wandb), not its ${...} placeholders.
        lists += [str(a) for a in sweep.get("command") or () if "=" in str(a) and not str(a).startswith("$")]
        hydra_form = f", or the same sweep with Hydra: -m {' '.join(lists)}" if lists else ""
    return (
        f"{key}={value}: conf/sweeps/ holds W&B sweep files ({', '.join(files)}), not a config group; run "
        f"`wandb sweep conf/sweeps/{name}.yaml` then `wandb agent ENTITY/PROJECT/SWEEP_ID`{hydra_form}"
    )


# Options of Hydra's command line and how many values each takes (hydra-core 1.3): None = one,
# "?" = an optional one from its choices.
_HYDRA_OPTION_VALUES: dict[str, int | str | None] = {
    **dict.fromkeys(("-h", "--help", "--hydra-help", "--version", "--resolve", "-r", "--run"), 0),
    **dict.fromkeys(("-m", "--multirun", "-sc", "--shell-completion"), 0),
    **dict.fromkeys(("-c", "--cfg", "-p", "--package", "-cp", "--config-path", "-cn", "--config-name"), None),
    **dict.fromkeys(("-cd", "--config-dir", "--experimental-rerun"), None),
    **dict.fromkeys(("-i", "--info"), "?"),
}
_INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def options_first(argv: list[str]) -> list[str]:
    """Hydra options first, then every override, so `a=1 -m b=1,2` works as `-m a=1 b=1,2`.

    Hydra's parser reads the overrides as one run of positional arguments: an option
    between two overrides (the `-m` in `sampler=entropycut -m budget.n_pf=8,12,20`) would
    leave the later ones "unrecognized". Values of options that take one stay with them.
    """
    options, overrides = split_options(argv)
    return [*options, *overrides]


def split_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's options with their values, the overrides) of a command line, each in order."""
    options: list[str] = []
    overrides: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        if token.startswith("-") and name in _HYDRA_OPTION_VALUES:
            options.append(token)
            arity = _HYDRA_OPTION_VALUES[name]
            takes_next = "=" not in token and i + 1 < len(argv)
            if takes_next and (arity is None or (arity == "?" and argv[i + 1] in _INFO_CHOICES)):
                options.append(argv[i + 1])
                i += 1
            elif arity == "?" and "=" not in token:
                # A bare --info would take the first override as its value once overrides follow it.
                options[-1] = f"{token}=all" if token.startswith("--") else "--info=all"
        elif token.startswith("-"):
            options.append(token)  # not Hydra's: let its parser report it
        else:
            overrides.append(token)
        i += 1
    return options, overrides


def is_sweep(argv: list[str]) -> bool:
    """Whether the command line asks for a multirun: ``-m``/``--multirun``, or the override
    ``hydra.mode=MULTIRUN`` (Hydra 1.3's other spelling of it)."""
    options, overrides = split_options(argv)
    if {token.split("=", 1)[0] for token in options} & {"-m", "--multirun"}:
        return True
    return any(o.lstrip("+").replace(" ", "") == "hydra.mode=MULTIRUN" for o in overrides)


def _mode(argv: list[str]) -> str:
    """``multirun`` (:func:`is_sweep`), ``print`` (only prints: --cfg, --info, --help, ...) or ``run``."""
    options, _ = split_options(argv)
    names = {token.split("=", 1)[0] for token in options}
    if is_sweep(argv):
        return "multirun"
    printing = {"-c", "--cfg", "-i", "--info", "-h", "--help", "--hydra-help", "--version", "-sc", "--shell-completion"}
    return "print" if names & printing else "run"


# Hydra's options that each choose what it does; it takes one of them (hydra-core 1.3).
_MODE_OPTIONS = {
    **dict.fromkeys(("-r", "--run"), "run"),
    **dict.fromkeys(("-m", "--multirun"), "multirun"),
    **dict.fromkeys(("-c", "--cfg"), "cfg"),
    **dict.fromkeys(("-i", "--info"), "info"),
    **dict.fromkeys(("-sc", "--shell-completion"), "shell completion"),
}


def check_one_mode(argv: list[str]) -> None:
    """Two of --run, -m, --cfg, --info, --shell-completion would be Hydra's ValueError, with a traceback."""
    options, _ = split_options(argv)
    given: dict[str, str] = {}  # mode -> the option as spelled first
    for token in options:
        name = token.split("=", 1)[0]
        if name in _MODE_OPTIONS:
            given.setdefault(_MODE_OPTIONS[name], name)
    if len(given) > 1:
        first, second = list(given.values())[:2]
        fail(
            f"{first} and {second} cannot be given together: Hydra takes one of --run, -m (--multirun), --cfg, "
            "--info, --shell-completion (to print a sweep job's config, drop -m and give that job's values)"
        )


def check_output_dirs(argv: list[str]) -> None:
    """An output directory that is an existing file would fail inside Hydra with a traceback.

    And one the mode does not read would be ignored without a word, the outputs going to the
    project's default directory: a run writes to ``hydra.run.dir``, the jobs of a sweep (``-m``)
    to ``hydra.sweep.dir``/N. (Given both, the one the mode does not read is left alone: a
    command line may carry both.)
    """
    given = set()
    for token in argv:
        key, _, value = token.lstrip("+").partition("=")
        if key in ("hydra.run.dir", "hydra.sweep.dir") and value:
            given.add(key)
            if Path(value).expanduser().is_file():
                fail(f"{key}={value} is a file; give a directory")
            blocking = _file_above(Path(value).expanduser())
            if blocking is not None and "${" not in value:
                fail(f"{key}={value} cannot be made: {blocking} is a file; give a directory")
    mode = _mode(argv)
    if mode == "multirun" and given == {"hydra.run.dir"}:
        fail(
            "hydra.run.dir is not used with -m: job N of a sweep writes to hydra.sweep.dir/N; "
            "pass hydra.sweep.dir=DIR instead (or drop -m for a single run)"
        )
    if mode == "run" and given == {"hydra.sweep.dir"}:
        fail(
            "hydra.sweep.dir is used only with -m (the jobs of a sweep): a single run writes to "
            "hydra.run.dir; pass hydra.run.dir=DIR instead (or add -m for a sweep)"
        )


def _file_above(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` where that is not a directory (no directory can be made under it)."""
    for parent in path.absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


# OSError numbers that are the run directory's state (permissions, a full or read-only disk), not a
# defect: one error line for them, a traceback for any other OSError.
_DISK_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EISDIR}
)


def _is_user_error(err: BaseException, errors: tuple[type[BaseException], ...]) -> bool:
    return isinstance(err, errors) or (isinstance(err, OSError) and err.errno in _DISK_ERRNOS)


def _user_message(err: BaseException) -> str:
    if isinstance(err, OSError) and err.errno in _DISK_ERRNOS and err.strerror:
        return f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def check_overrides(conf_dir: Path, argv: list[str], config_name: str = "config") -> None:
    """Compose the config as Hydra will, and with -m validate every point of the sweep, before any job.

    An override Hydra cannot apply (an unknown key without ``+``) is one line here instead
    of Hydra's multi-line message (or, in a sweep, a traceback). Hydra composes each job's
    config only when that job starts, so a bad value in the third point of a sweep would
    stop it after hours of the first two: each point is composed as the basic sweeper will
    (a cartesian product of the comma lists) and checked as a run checks it before loading
    anything. (A single run validates its values itself, right after composing.) Sweep
    points are validated as runs only for the run config (``config_name="config"``).
    """
    options, overrides = split_options(argv)
    names = {token.split("=", 1)[0] for token in options if token.startswith("-")}
    if names & {"-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir"}:
        return  # another primary config than conf/config.yaml: Hydra checks each job itself
    if names & {"-h", "--help", "--hydra-help", "--version", "-sc", "--shell-completion", "--experimental-rerun"}:
        return
    multirun = is_sweep(argv)
    overrides = [t for t in overrides if not t.lstrip("+~").startswith("hydra")]
    if multirun:
        try:
            from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
            from hydra.core.override_parser.overrides_parser import OverridesParser

            points = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None)[0]
        except Exception:  # a syntax or sweeper this check does not know: Hydra reports it itself
            return
    else:
        points = [overrides]
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    swept = {o for point in points for o in point if any(o not in other for other in points)}
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir)):
        for number, point in enumerate(points):
            where = f"sweep job {number} of {len(points)} ({' '.join(o for o in point if o in swept)}): "
            where = where if len(points) > 1 else ""
            try:
                cfg = compose(config_name=config_name, overrides=point)
            except HydraException as err:
                fail(f"{where}{_one_line(err)}" + ("; no job was started" if where else ""))
            if len(points) < 2 or config_name != "config":
                continue
            # Only a sweep of runs gets here: the run modules are not loaded for a single run's check
            # (it validates itself) or for train_predictor.
            from presto.config import validate
            from presto.runner.run import build_sampler, build_traversal

            try:
                settings = validate(cfg)
                build_sampler(settings.sampler)
                build_traversal(settings)
            except user_errors() as err:
                fail(f"{where}{str(err).splitlines()[0]}; no job was started")
            if OmegaConf.select(cfg, "logger.name") == "wandb" and os.environ.get("WANDB_RUN_ID"):
                # W&B takes that id over a run's own: every job would log into one W&B run, each
                # replacing the last one's config and summary, its rows from step 0 dropped on sync.
                fail(
                    f"WANDB_RUN_ID={os.environ['WANDB_RUN_ID']} is set, so every job of this -m sweep "
                    "would log into that one W&B run: unset it (each job then gets its own W&B run), or drop -m; "
                    "no job was started"
                )


def check_launcher(argv: list[str]) -> None:
    """``launcher=slurm`` off a Slurm cluster would fail inside submitit with a traceback.

    And a launcher places the jobs of a sweep: without ``-m`` Hydra ignores it and the run goes
    ahead in this process (with ``launcher=slurm``, on a cluster's login node).
    """
    import shutil

    _, overrides = split_options(argv)
    # launcher=X (conf/launcher) and hydra/launcher=X (Hydra's own group) choose the same; null is no launcher.
    launcher = next(
        (
            o
            for o in overrides
            if o.lstrip("+").split("=", 1)[0] in ("launcher", "hydra/launcher")
            and o.split("=", 1)[1:] not in ([""], ["null"])
        ),
        None,
    )
    if launcher is not None and _mode(argv) == "run":
        fail(
            f"{launcher.lstrip('+')} runs the jobs of a sweep, and without -m this is a single run in this "
            "process: add -m (e.g. -m budget.n_pf=8,12,20), or drop the launcher"
        )
    if "launcher=slurm" in overrides and shutil.which("srun") is None:
        fail(
            "launcher=slurm needs Slurm (no srun on PATH): run the sweep on a cluster's login node, "
            "or use launcher=joblib (local processes) or launcher=submitit_local"
        )


def _one_line(err: BaseException) -> str:
    """Hydra's message without its indented detail lines, joined into one line."""
    lines = [line.strip().rstrip(".") for line in str(err).splitlines() if line.strip() and not line[0].isspace()]
    return "; ".join(lines) or type(err).__name__


def with_default_engine(overrides: list[str]) -> list[str]:
    """Without an `engine=` override, run on vLLM when it is installed, else on transformers."""
    given = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    if "engine" in given:
        return overrides
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return [*overrides, "engine=vllm"]
    chosen = [*overrides, "engine=hf"]
    where = "on the CPU"
    if "engine.device" not in given and _torch_sees_cuda():
        # The hf engine's own default is the CPU; a GPU machine without vLLM should still use its GPU.
        chosen.append("engine.device=cuda")
        where = "on the GPU (engine.device=cuda)"
    print(f"notice: vLLM is not installed, running on engine=hf {where} (bash scripts/install.sh installs vLLM)")
    return chosen


def _torch_sees_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def user_errors() -> tuple[type[BaseException], ...]:
    from presto.config import ConfigError

    errors: list[type[BaseException]] = [ConfigError, FileExistsError, FileNotFoundError]
    from presto.engines.toy import ToyTableError

    errors.append(ToyTableError)
    from presto.models import ModelNotFoundError
    from presto.tasks import GradingError, TaskDataError

    errors += [ModelNotFoundError, TaskDataError, GradingError]
    from presto.engines.errors import EngineUnavailableError

    errors.append(EngineUnavailableError)
    return tuple(errors)


def _run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _is_nonempty_file(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _remove_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):  # not empty, or already gone: leave it
        path.rmdir()


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    keys = (
        "sampler",
        "traversal",
        "n_pf",
        "chains",
        "transitions",
        "model_calls",
        "transitions_per_call",
        "time_per_call_s",
        "call_time_s",
        "acceptance_rate",
        "loglik_mean",
        "confidence_mean",
        "loglik_rescored_mean",
        "confidence_rescored_mean",
        "accuracy",
        "prefix_cache_hit_rate",
        "peak_kv_usage",
        "wall_time_s",
    )
    width = max(len(k) for k in keys)
    print(f"\nrun directory: {run_dir}")
    for key in keys:
        value = summary.get(key)
        if value is None:  # not measured, or not defined for this sampler (a baseline has no transitions)
            continue
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"  {key:<{width}}  {shown}")


_TERMINATED = "SIGTERM"


def terminate_like_interrupt() -> dict | None:
    """Treat SIGTERM (Slurm's time limit, ``kill``) as Ctrl-C, so the summary is written and the engine closed
    (used by the run and by scripts/benchmark.py); the KeyboardInterrupt's argument says it was SIGTERM.

    SIGINT gets Python's own handler back: a job started in the background by a shell script
    inherits SIGINT ignored, and ``kill -INT`` (or ``timeout -s INT``) would then do nothing.
    Returns the handlers it replaced, by signal, for a caller that restores them; None where
    none can be set (not the main thread). A run takes one SIGTERM: later ones are ignored while
    it ends (:func:`_interrupt`); Ctrl-C still interrupts. A SIGTERM whose KeyboardInterrupt
    Python drops is delivered again (:func:`_redeliver_dropped_termination`).
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None  # signal handlers can only be set there (e.g. not in a joblib worker thread)
    if sys.unraisablehook is not _redeliver_dropped_termination:
        global _unraisablehook
        _unraisablehook = sys.unraisablehook
        sys.unraisablehook = _redeliver_dropped_termination
    return {
        signal.SIGTERM: signal.signal(signal.SIGTERM, _interrupt),
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }


def _interrupt(signum, frame):
    # One per run: a second SIGTERM (a sweep's launcher forwards one to a job whose whole process
    # group was sent one, as Slurm's time limit or `timeout` do) would land wherever the ending
    # run is, its summary or the message that names it.
    signal.signal(signal.SIGTERM, _terminating)
    raise KeyboardInterrupt(_TERMINATED)


def _terminating(signum, frame):
    """SIGTERM once the run has taken one: it is ending already."""


_unraisablehook = sys.unraisablehook  # the one _redeliver_dropped_termination passes the rest to


def _redeliver_dropped_termination(unraisable) -> None:
    """``sys.unraisablehook``: send SIGTERM again when Python dropped the KeyboardInterrupt of one.

    A signal handler's exception raised while Python runs a ``__del__`` or a weakref callback
    (the import system's, as a job's first chain imported numpy.random) is only printed
    ("Exception ignored in ..."), and the run would go on as if never told to stop. The signal is
    sent again from another thread, to be handled once the callback is over; any other
    exception goes to the hook there was before.
    """
    import signal
    import threading

    error = unraisable.exc_value
    if not (isinstance(error, KeyboardInterrupt) and error.args == (_TERMINATED,)):
        _unraisablehook(unraisable)
    elif signal.getsignal(signal.SIGTERM) in (_interrupt, _terminating):  # a run's: not once its handlers were restored
        signal.signal(signal.SIGTERM, _interrupt)  # its interrupt never reached the run: take the next one
        threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGTERM)).start()


_terminated_here = False
"""Whether this process has been told to end its sweep: its job was ended by SIGTERM, or it is the
sweep's launcher and got one (:class:`SweepTermination`). :func:`execute` then starts no other job."""


def _restore_after_job(replaced: dict | None) -> None:
    """Give SIGTERM and SIGINT back the handlers :func:`terminate_like_interrupt` replaced.

    Except that a sweep job's process whose SIGTERM did the default (a joblib worker, between
    jobs) ignores it from then on: a worker killed by a SIGTERM its launcher sent as its job
    ended would make joblib's executor kill the busy ones before their summaries are written.
    """
    import signal

    if replaced is None:
        return
    for signum, handler in replaced.items():
        if signum == signal.SIGTERM and handler == signal.SIG_DFL and _sweep_job_or_none() is not None:
            handler = signal.SIG_IGN
        if handler is not None:  # None: a handler not set from Python, which cannot be set back
            signal.signal(signum, handler)


def _sweep_job_or_none() -> int | None:
    """:func:`_sweep_job`, or None outside a Hydra job (execute driven by hand)."""
    try:
        return _sweep_job()
    except ValueError:  # "HydraConfig was not set"
        return None


# Launchers whose jobs run on this machine, in this process or its children; a Slurm job is no
# child of the launcher, and goes on when the launcher ends (scancel ends it).
_LOCAL_LAUNCHERS = ("BasicLauncher", "JoblibLauncher", "LocalLauncher")


def _local_launcher(launcher: DictConfig) -> bool:
    """Whether ``launcher`` (the ``hydra.launcher`` node) runs its jobs on this machine."""
    return str(OmegaConf.select(launcher, "_target_", default="")).rsplit(".", 1)[-1] in _LOCAL_LAUNCHERS


class SweepTermination(Callback):
    """Hydra callback (conf/config.yaml ``hydra.callbacks``): a SIGTERM to the launcher of a local sweep
    (``-m``, no launcher or ``launcher=joblib|submitit_local``) ends it as a SIGTERM ends a run.

    Without it only the launcher died (status 143, no message), and its workers ran on, orphaned,
    to the end of their jobs. Its handler marks the sweep terminated, so that no job starts
    after it (:func:`execute`), and from then on sends SIGTERM once to each child process that
    handles it: a running job (:func:`execute` handles it), which writes its summary, prints how
    to resume it and returns. An idle joblib worker, which would die of it (and joblib would
    then kill the busy ones), and the resource trackers, which ignore it, are not sent it. Once
    every job has returned the launcher exits as usual (its workers with it), with status 143
    and one line naming the sweep directory and the resume command. (Linux: the children are
    read from /proc.) A job that does not take the SIGTERM runs on and is waited for: a submitit
    job still starting (submitit's own handler ignores it), or one whose interrupt a C extension
    dropped as the job imported it (numpy.random, at a chain's first draw); a second SIGTERM
    ends the launcher at once. A SIGTERM sent to one job's worker process ends the sweep the
    same way (the job tells the launcher, :func:`_tell_launcher`), and one sent to the whole
    process group reaches each job twice, directly and forwarded: a run takes only the first.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        import signal
        import threading

        if not _local_launcher(config.hydra.launcher):
            return

        def end_sweep(signum, frame):
            global _terminated_here, _forwarding
            if _forwarding is not None:
                if signum == signal.SIGTERM:  # the second SIGTERM
                    print(f"terminated: {self._message(config)}", file=sys.stderr)
                    raise SystemExit(143)
                return  # another job's news that it was terminated: the sweep is ending already
            _terminated_here = True
            # A module global, not this callback's: Hydra pickles the callbacks with each job it sends to a worker.
            _forwarding = threading.Event()
            threading.Thread(target=_end_running_jobs, args=(_forwarding,), daemon=True).start()

        signal.signal(signal.SIGTERM, end_sweep)
        # A job in a worker process that a SIGTERM of its own ended tells the launcher so
        # (:func:`_tell_launcher`), and the sweep ends as if the launcher had been sent it.
        signal.signal(_JOB_TERMINATED, end_sweep)
        os.environ[_LAUNCHER_ENV] = str(os.getpid())  # inherited by the worker processes started after this

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not _terminated_here or not _local_launcher(config.hydra.launcher):
            return  # not terminated, or a Slurm job was (its launcher's sweep went on)
        if _forwarding is not None:
            _forwarding.set()  # stops it
        print(f"terminated: {self._message(config)}", file=sys.stderr)
        raise SystemExit(143)  # not an Exception: Hydra would only warn

    @staticmethod
    def _message(config: DictConfig) -> str:
        try:  # resolved by the launcher by now, and cached (${now:}, ${pid:}): the directory it announced
            where = str(config.hydra.sweep.dir)
        except Exception:  # an interpolation that cannot be resolved here
            where = "hydra.sweep.dir"
        return (
            f"the sweep in {where} stopped, its running jobs after writing their summaries; "
            f"rerun with the same overrides and -m run.resume=true hydra.sweep.dir={where}"
        )


_LAUNCHER_ENV = "PRESTO_SWEEP_LAUNCHER_PID"
_JOB_TERMINATED = signal.SIGUSR1  # a job's signal to its sweep's launcher: "a SIGTERM ended me"


def _tell_launcher() -> None:
    """Tell a local sweep's launcher, from a worker process, that a SIGTERM sent to this job alone ended it.

    Else that worker would skip the jobs queued to it and the sweep would end with status 0,
    the stop said only in a worker's log. The launcher ends the sweep as on its own SIGTERM.
    In the launcher's own process (the basic launcher) there is nobody to tell.
    """
    launcher = os.environ.get(_LAUNCHER_ENV, "")
    if launcher.isdigit() and int(launcher) != os.getpid():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(launcher), _JOB_TERMINATED)


_forwarding: Any = None
"""Set (a threading.Event) once the sweep's launcher got SIGTERM; setting the event ends the forwarding."""


def _end_running_jobs(stop, poll_s: float = 0.1) -> None:
    """Until ``stop`` is set, send SIGTERM to each child process that handles it, once per job.

    A child that stops handling it (its job returned) and later handles it again has started
    another job (a worker that had none as the SIGTERM came, taking one still queued): that one
    is sent it too. None is sent it twice in one job: a second would interrupt the summary.
    """
    import signal

    signalled: set[int] = set()
    while not stop.is_set():
        running = {pid for pid in _child_pids() if _handles(pid, signal.SIGTERM)}
        for pid in running - signalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        signalled = running
        stop.wait(poll_s)


def _child_pids() -> list[int]:
    """This process's children that have not ended (Linux /proc; elsewhere none are found)."""
    me = os.getpid()
    children = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as stat:
                    # After the command name, which may hold spaces and parentheses: state, parent pid, ...
                    state, parent = stat.read().rsplit(")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue  # ended meanwhile
            if int(parent) == me and state not in ("Z", "X"):
                children.append(int(entry.name))
    return children


def _handles(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask): not the default, not ignored."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass  # ended meanwhile
    return False


def _sweep_job() -> int | None:
    """This job's number in a multirun (``-m``), None in a single run."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    return hydra_cfg.job.num if hydra_cfg.mode == RunMode.MULTIRUN else None


def _hydra_launcher() -> DictConfig:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().launcher


def _resume_overrides(run_dir: Path) -> str:
    """The overrides that continue this run: the default directory is named by the time it started,
    so ``run.resume=true`` alone would start a new run in a new directory."""
    from hydra.core.hydra_config import HydraConfig

    if _sweep_job() is None:
        return f"run.resume=true hydra.run.dir={run_dir}"
    return f"-m run.resume=true hydra.sweep.dir={HydraConfig.get().sweep.dir}"


class SweepJobFailed(CompactHydraException):
    """A sweep job stopped by a user error, raised instead of exiting.

    ``sys.exit`` in one job would end the whole sweep (Hydra catches only ``Exception`` per job).
    Raised, it lets the other jobs run (in this process or a launcher's, as it pickles); the sweeper
    re-raises the first once the batch is done, and Hydra prints a ``CompactHydraException`` as its
    message, without a traceback, and exits with status 1.
    """


def release_job_state(err: BaseException) -> None:
    """Drop the local variables of the finished frames that a failed sweep job's exception passed through.

    Hydra keeps each job's exception until the sweep's last job is done (to re-raise the first
    failure), and a traceback keeps its frames: the job's engine (its model, maybe on a GPU), its
    task and its chain records would stay in memory beside every later job, one more set per
    failed job. The traceback itself (files, lines, the message) is kept.
    """
    import traceback

    pending: list[BaseException | None] = [err]
    seen: set[int] = set()
    while pending:  # chained exceptions (cause, context) carry frames of the job too
        err = pending.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        traceback.clear_frames(err.__traceback__)  # skips the frames still running (this one's callers)
        pending += [err.__cause__, err.__context__]


def unused_options(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """Notices for what this run does not use of what was given: an option dropped without a word
    looks like one in effect (a -m sweep over traversals runs a baseline once per traversal).

    ``cfg``: the validated run config; ``overrides``: the command line's (a sweep job's own, its
    swept values included).
    """
    from presto.baselines import BASELINES

    if not isinstance(cfg, DictConfig):  # no composed config (execute driven by hand): nothing to compare
        return []

    given: dict[str, str] = {}
    for override in overrides:
        given[override.lstrip("+~").split("=", 1)[0]] = override.lstrip("+")  # the last one given wins, as in Hydra

    def named(*keys: str) -> list[str]:
        """The overrides given of these keys, a group's (``traversal``) naming its own keys too."""
        return [text for key, text in given.items() if key in keys or key.split(".", 1)[0] in keys]

    notices = []
    sampler = OmegaConf.select(cfg, "sampler.name")
    if sampler in BASELINES:
        keys = ["traversal", "budget", "sampler.steps"]
        if sampler != "power_smc":  # Power-SMC grows its answers in blocks of sampler.block_size
            keys.append("sampler.block_size")
        unused = named(*keys)
        if unused:
            notices.append(
                f"sampler={sampler} is a test-time baseline (whole answers, no MH transitions or prefetch): "
                f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} not used "
                '(its summary says "traversal": "none")'
            )
    elif OmegaConf.select(cfg, "traversal.name") == "sequential" and named("budget"):
        unused = named("budget")
        notices.append(
            f"traversal=sequential makes one model call per transition: {', '.join(unused)} "
            f"{'is' if len(unused) == 1 else 'are'} not used "
            '(its summary says "n_pf": 1)'
        )
    if OmegaConf.select(cfg, "engine.name") == "toy":
        dataset = OmegaConf.select(cfg, "dataset.name")
        if dataset not in (None, "toy"):
            notices.append(
                f"engine=toy has no tokenizer: every chain starts from an empty prompt, not one of "
                f"dataset={dataset}, and its text is token ids, so its grades mean nothing (dataset=toy is the "
                "toy engine's)"
            )
        models = [text for key, text in given.items() if key.split(".", 1)[0] == "model" and text != "model=toy"]
        if models:
            notices.append(f"engine=toy serves its table (engine.table), not a model: {', '.join(models)} is not used")
    return notices


def _task_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # "HydraConfig was not set": execute called outside a Hydra job, no command line
        return []


def execute(cfg: DictConfig) -> float | None:
    """Validate, run, print the summary; return the metric a sweeper minimizes (call time).

    SIGTERM and Ctrl-C end the run as an interrupt (:func:`terminate_like_interrupt`) while it
    runs, and get their handlers back after it (:func:`_restore_after_job`). In a sweep on this
    machine a SIGTERM ends the sweep: the job returns (None) once its summary is written, and
    its process starts no other job (a joblib worker would take the next one queued); the
    launcher then exits (:class:`SweepTermination`).
    """
    run_dir = _run_dir()
    if _terminated_here:  # the sweep was terminated: this job is not started
        _remove_if_empty(run_dir)
        print(f"notice: sweep job {_sweep_job()} not started: the sweep was terminated", file=sys.stderr)
        return None
    replaced = terminate_like_interrupt()
    try:
        return _execute(cfg, run_dir)
    finally:
        _restore_after_job(replaced)


def _execute(cfg: DictConfig, run_dir: Path) -> float | None:
    from presto.config import validate

    global _terminated_here
    errors = user_errors()
    try:
        validate(cfg)
        for notice in unused_options(cfg, _task_overrides()):
            print(f"notice: {notice}", file=sys.stderr)
        from presto.runner.run import run

        summary = run(cfg, run_dir)
    except Exception as err:
        if not _is_user_error(err, errors):
            if _sweep_job() is not None:  # Hydra keeps it and runs the next jobs: see release_job_state
                release_job_state(err)
            raise
        _remove_if_empty(run_dir)
        message = _user_message(err)
        job = _sweep_job()
        if job is None:
            fail(message)
        # In a sweep, one job's mistake (e.g. its directory already holds chains) must not cancel the rest.
        print(f"error: sweep job {job}: {message}", file=sys.stderr)
        release_job_state(err)
        raise SweepJobFailed(f"error: sweep job {job} failed: {message}; the sweep's other jobs were run") from None
    except KeyboardInterrupt as interrupt:
        terminated = bool(interrupt.args) and interrupt.args[0] == _TERMINATED
        chains = run_dir / "chains.jsonl"
        # Interrupted while the engine loaded, or before the first chain finished: no file to point at.
        held = f"finished chains are in {chains}" if _is_nonempty_file(chains) else "no chain had finished"
        print(
            f"\n{'terminated' if terminated else 'interrupted'}: {held}; "
            f"rerun with the same overrides and {_resume_overrides(run_dir)}",
            file=sys.stderr,
        )
        if terminated and _sweep_job() is not None and _local_launcher(_hydra_launcher()):
            # Returned, not raised: joblib would kill its other workers before their summaries are
            # written, and the launcher exits with status 143 once every job has returned.
            _terminated_here = True
            _tell_launcher()
            return None
        from presto.runner.logging import exit_status

        sys.exit(exit_status(interrupt))  # 143 or 130: what the run's logger was told
    print_summary(summary, run_dir)
    return summary.get("call_time_s")
