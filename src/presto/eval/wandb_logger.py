"""Weights & Biases logging of a run: config, per-round and per-chain metrics, summary, plots.

``logger=wandb`` selects it (conf/logger/wandb.yaml). Without credentials for the W&B server
(``wandb login``'s netrc entry, also for a ``--host``, or ``WANDB_API_KEY``) and no explicit
``logger.mode``, it runs offline and says so: everything is written under the W&B directory
(``logger.dir``, else ``$WANDB_DIR``, else the run directory) and can be uploaded later with
``wandb sync``. An online start that fails (no network: after ``$WANDB_INIT_TIMEOUT``) falls
back to offline, with one warning line. Inside a W&B sweep agent,
``wandb.init`` joins the agent's run, and the summary's ``call_time_s`` is the metric the
sweep reads. Elsewhere a run directory keeps its W&B run id (``wandb_run_id``), so a
resumed run continues the same W&B run, its metric indices and its W&B steps (kept in
``wandb_indices.json``: offline, W&B itself would start a resumed run at step 0 again, and
on upload the server drops rows whose step is not past the run's last one). The jobs of a
Hydra multirun (``-m``) are grouped by their multirun directory's name unless
``logger.group`` says otherwise.

What goes where:

- the resolved run config -> the W&B run config;
- each prefetch round -> ``round/*`` (realized transitions, requested depths, requests,
  the round's call time, epsilon-class counts of its scored decisions), stepped by
  ``round/index``;
- each chain -> ``chain/*`` (transitions, model calls, call time, transitions per call,
  acceptance rate, loglik, confidence, correctness), stepped by ``chain/index``;
- the summary -> the W&B run summary, and summary.json as a file of the W&B run;
- at the end, the figures of presto.eval.plots for this run as images, and the run's exit
  code (non-zero for an interrupted, failed or incomplete run: W&B shows it as such).

A logger must never make a run fail: the first error is reported on stderr, after which
the logger stops sending.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from presto.runner.outputs import count_jsonl, write_text_atomic

MODES = ("online", "offline", "disabled")


PUBLIC_URL = "https://api.wandb.ai"


def has_credentials(environ: Mapping[str, str] = os.environ) -> bool:
    """An API key for the W&B server runs log to, found where wandb finds one: ``$WANDB_API_KEY``
    (or an identity token file), an ``api_key`` in wandb's settings files, or the netrc entry
    ``wandb login`` writes for the server's host. The server, as wandb resolves it:
    ``$WANDB_BASE_URL``, else the ``base_url`` of wandb's settings files (``wandb login --host
    URL`` keeps it there), else the public cloud. Never raises: what cannot be read is absent.
    """
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        settings = wandb_settings(environ)
    except Exception:  # no home or working directory to look in: as if wandb had no settings files
        settings = {}
    if settings.get("api_key"):
        return True
    return _netrc_has_key(environ.get("WANDB_BASE_URL") or settings.get("base_url") or PUBLIC_URL, environ)


def wandb_settings(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The ``[default]`` settings of wandb's settings files, as wandb reads them: the global file
    (``$WANDB_CONFIG_DIR/settings``, else ``~/.config/wandb/settings``) overridden by the
    workspace's (``./wandb/settings``, from ``wandb init``). A file that cannot be read counts as
    empty, as in wandb."""
    import configparser

    config_dir = environ.get("WANDB_CONFIG_DIR")
    home = Path(environ.get("HOME") or Path.home())
    global_dir = Path(config_dir).expanduser() if config_dir else home / ".config" / "wandb"
    workspace = Path.cwd() / (".wandb" if (Path.cwd() / ".wandb").exists() else "wandb")
    settings: dict[str, str] = {}
    for path in (global_dir / "settings", workspace / "settings"):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
            if parser.has_section("default"):
                settings.update(parser.items("default"))
        except Exception:  # malformed or unreadable: the mode check must never fail a run
            continue
    return settings


def _netrc_has_key(url: str, environ: Mapping[str, str]) -> bool:
    """Whether the netrc file (``$NETRC``, else ``~/.netrc``) has an entry for ``url``'s host."""
    import netrc
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        hosts = {parts.netloc, parts.hostname} - {None, ""}  # wandb writes host:port for a server on a port
        path = environ.get("NETRC") or str(Path(environ.get("HOME") or Path.home()) / ".netrc")
        entries = netrc.netrc(path)
        return any(entries.authenticators(host) is not None for host in hosts)
    except Exception:  # no netrc, a malformed one, or a base URL that is none: no key found
        return False


def resolve_mode(mode: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """``logger.mode``, else ``$WANDB_MODE``, else online when W&B has credentials (key or ``wandb login``)."""
    return _mode_and_source(mode, environ)[0]


def mode_source(mode: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """Why :func:`resolve_mode` chose what it chose, for a notice (e.g. ``WANDB_MODE=offline``)."""
    resolved, source = _mode_and_source(mode, environ)
    if source == "credentials":
        return "W&B has credentials" if resolved == "online" else "no API key: `wandb login` or WANDB_API_KEY"
    return f"{source}={resolved}"


def _mode_and_source(mode: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    source = "logger.mode"
    if mode is None and environ.get("WANDB_MODE"):
        mode, source = environ["WANDB_MODE"], "WANDB_MODE"
    if mode is None:
        mode, source = ("online" if has_credentials(environ) else "offline"), "credentials"
    mode = {"dryrun": "offline", "run": "online"}.get(mode, mode)  # wandb's older names
    if mode not in MODES:
        raise ValueError(f"{source}={mode} is not allowed; choose one of: {', '.join(MODES)}")
    return mode, source


def run_label(run_config: Mapping[str, Any]) -> str:
    """sampler-traversal-npfN as the run used them: a baseline has neither, a sequential run no budget."""
    from presto.baselines import BASELINES

    sampler = run_config.get("sampler", {}).get("name")
    traversal = run_config.get("traversal", {}).get("name")
    if sampler in BASELINES:
        return str(sampler)
    if traversal == "sequential":
        return f"{sampler}-sequential"
    return f"{sampler}-{traversal}-npf{run_config.get('budget', {}).get('n_pf')}"


def one_line(text: str) -> str:
    """``text`` on one line: wandb's errors run over several, and a run's stderr is read line by line."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _scalars(record: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in keys:
        value = record.get(key)
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, int | float):
            out[key] = value
    return out


INDICES_FILE = "wandb_indices.json"
"""Next round and chain metric indices and next W&B step of a run directory's W&B run, kept across resumes."""


def multirun_group() -> str | None:
    """The name of the Hydra multirun directory this process runs a job of, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            return Path(str(HydraConfig.get().sweep.dir)).name or None
    except Exception:  # no Hydra, or a config without hydra.sweep: no group rather than no logging
        pass
    return None


class WandbLogger:
    """RunLogger that mirrors a run into a W&B run (offline unless a key or mode says otherwise)."""

    def __init__(self, logger_cfg: dict[str, Any], run_config: dict[str, Any], run_dir: Path) -> None:
        self.cfg = logger_cfg
        self.run_dir = Path(run_dir)
        self.rounds = 0
        self.chains = 0
        self.step = 0  # the W&B step of the next row this logger sends
        self.log_rounds = bool(logger_cfg.get("log_rounds", True))
        self.log_plots = bool(logger_cfg.get("log_plots", True))
        self._failed = False
        self._sync_hint: str | None = None  # `wandb sync DIR...` of an offline run
        self._complete: bool | None = None  # the summary's `complete`, once the run sends it
        self._run = None
        self._guard(self._init, logger_cfg.get("mode"), run_config)

    # --- plumbing ----------------------------------------------------------------------

    def _guard(self, fn, *args) -> None:
        if self._failed:
            return
        try:
            fn(*args)
        except Exception as err:  # never fail a run because of the tracker
            self._failed = True
            print(f"warning: W&B logging stopped: {type(err).__name__}: {one_line(err)}", file=sys.stderr)

    def _init(self, mode: str | None, run_config: dict[str, Any]) -> None:
        why = mode_source(mode)
        mode = resolve_mode(mode)
        import wandb

        wandb_dir = self.cfg.get("dir") or os.environ.get("WANDB_DIR") or str(self.run_dir)
        Path(wandb_dir).mkdir(parents=True, exist_ok=True)
        # A resumed run continues its W&B run (same id) and its metric indices, unless a sweep
        # agent decides the run (it sets WANDB_RUN_ID for the run it launched).
        resume = {}
        if not os.environ.get("WANDB_RUN_ID"):
            resume = {"id": self._run_id(), "resume": "allow"}
        # Past every index logged before: a resumed run drops from trees.jsonl the rounds of the
        # chain it was interrupted in, but W&B already holds them at their indices.
        logged = self._logged_indices()
        # Counted a record at a time: a long run's trees.jsonl (GBs) would not fit in memory parsed.
        self.chains = max(count_jsonl(self.run_dir / "chains.jsonl"), logged.get("chains", 0))
        self.rounds = max(count_jsonl(self.run_dir / "trees.jsonl"), logged.get("rounds", 0))
        init = {
            "project": self.cfg.get("project") or "presto",
            "entity": self.cfg.get("entity"),
            "group": self.cfg.get("group") or multirun_group(),
            "tags": list(self.cfg.get("tags") or []),
            "name": self.cfg.get("run_name") or f"{run_label(run_config)}-{self.run_dir.name}",
            "job_type": self.cfg.get("job_type") or "sample",
            "dir": wandb_dir,
            "config": run_config,
            "settings": wandb.Settings(console="off", silent=True),
            **resume,
        }
        online_error = None
        try:
            self._run = wandb.init(mode=mode, **init)
        except Exception as err:
            if mode != "online":
                raise
            # A key but no network (or a server that does not answer): wandb.init gives up after
            # $WANDB_INIT_TIMEOUT. The same run offline keeps a record of this run to sync later.
            online_error, mode = err, "offline"
            try:
                wandb.teardown()  # wandb's service still holds the failed run ("run ID ... is in use"): a fresh one
            except SystemExit as exit_:  # teardown exits when the service ended badly: stop logging, not the run
                why = f"{type(err).__name__}: {err}"
                raise RuntimeError(f"wandb.teardown() exited ({exit_.code}) after {why}") from None
            self._run = wandb.init(mode=mode, **init)
        # Every row goes at an explicit step past those this run directory's W&B run already has:
        # offline, W&B restarts a resumed run at step 0, and the server would drop those rows
        # on `wandb sync`. Without a stored step (a directory from before it was kept), past the
        # rows its rounds and chains took, and a row of plots.
        resumed = self.rounds + self.chains + 1 if self.rounds or self.chains else 0
        try:  # online, a resumed run's next step as the server knows it
            next_step = int(self._run.step or 0)
        except Exception:  # a stand-in run (mode=disabled) or a mode that does not say
            next_step = 0
        self.step = max(logged.get("step", resumed), next_step)
        if mode == "offline":
            self._sync_hint = f"`wandb sync {' '.join(str(part) for part in self._offline_parts())}`"
        if online_error is not None:
            print(
                f"warning: W&B could not start online ({type(online_error).__name__}: {one_line(online_error)}); "
                f"this run logs offline: upload later with {self._sync_hint} (WANDB_INIT_TIMEOUT sets how long "
                "wandb waits; WANDB_MODE=offline skips the wait)",
                file=sys.stderr,
            )
        elif mode == "offline":
            print(f"notice: W&B is offline ({why}); upload later with {self._sync_hint}", file=sys.stderr)
        self._run.config.update({"run_dir": str(self.run_dir)}, allow_val_change=True)
        self._run.define_metric("round/index")
        self._run.define_metric("round/*", step_metric="round/index")
        self._run.define_metric("chain/index")
        self._run.define_metric("chain/*", step_metric="chain/index")

    def _offline_parts(self) -> list[Path]:
        """This W&B run's offline folders in its wandb directory, oldest first (by their names'
        time): each resume adds one, and they must be synced in that order, as the server drops
        rows whose step is not past the run's last one."""
        import glob

        current = Path(self._run.dir).parent
        earlier = current.parent.glob(f"offline-run-*-{glob.escape(str(self._run.id))}")
        return sorted({*earlier, current}, key=lambda part: part.name)

    def _logged_indices(self) -> dict[str, int]:
        """The next round and chain indices this run directory's W&B run has not used (``wandb_indices.json``)."""
        try:
            stored = json.loads((self.run_dir / INDICES_FILE).read_text())
            return {k: int(stored[k]) for k in ("rounds", "chains", "step") if isinstance(stored.get(k), int)}
        except (OSError, ValueError, AttributeError):
            return {}

    def _save_indices(self) -> None:
        indices = {"rounds": self.rounds, "chains": self.chains, "step": self.step}
        # Not fsynced (once per row: milliseconds each): it has to survive the process being
        # killed, for the no-reused-step promise of _log, not a power loss.
        write_text_atomic(self.run_dir / INDICES_FILE, json.dumps(indices), durable=False)

    def _log(self, metrics: Mapping[str, Any]) -> None:
        """One row at the next step, stored first: a kill between the two skips a step, never reuses one."""
        step = self.step
        self.step += 1
        self._save_indices()
        self._run.log(dict(metrics), step=step)

    def _run_id(self) -> str:
        """The W&B run id of this run directory, made once and kept in it (``wandb_run_id``)."""
        path = self.run_dir / "wandb_run_id"
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        import secrets

        run_id = secrets.token_hex(4)  # W&B ids: lowercase letters and digits
        path.write_text(run_id + "\n")
        return run_id

    # --- RunLogger ---------------------------------------------------------------------

    def on_round(self, record: Mapping[str, Any]) -> None:
        if self.log_rounds:
            self._guard(self._on_round, record)

    def _on_round(self, record: Mapping[str, Any]) -> None:
        nodes = record.get("nodes") or []
        classes = [n.get("eps_class") for n in nodes if n.get("eps_class")]
        metrics = {f"round/{k}": v for k, v in _scalars(record, ("realized", "call_time_s", "requests")).items()}
        metrics.update(
            {
                "round/index": self.rounds,
                "round/requested_depths": len(record.get("requested_depths") or []),
                "round/depth_cap": record.get("depth_cap"),
                "round/eps_accept": classes.count("accept"),
                "round/eps_reject": classes.count("reject"),
                "round/eps_uncertain": classes.count("uncertain"),
            }
        )
        self.rounds += 1
        self._log(metrics)

    def on_chain(self, record: Mapping[str, Any]) -> None:
        self._guard(self._on_chain, record)

    def _on_chain(self, record: Mapping[str, Any]) -> None:
        keys = (
            "transitions",
            "model_calls",
            "call_time_s",
            "wall_time_s",
            "loglik",
            "confidence",
            "loglik_rescored",
            "confidence_rescored",
            "correct",
        )
        metrics = {f"chain/{k}": v for k, v in _scalars(record, keys).items()}
        accepts = record.get("accepts") or []
        calls = record.get("model_calls") or 0
        metrics["chain/index"] = self.chains
        if calls and accepts:  # a test-time baseline makes no MH transitions
            metrics["chain/transitions_per_call"] = len(accepts) / calls
        if accepts:
            metrics["chain/acceptance_rate"] = sum(accepts) / len(accepts)
        self.chains += 1
        self._log(metrics)

    def on_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        self._complete = summary.get("complete")
        self._guard(self._on_summary, summary, Path(run_dir))
        if self.log_plots:
            # RUN_DIR/plots is the run's own output: written even where W&B logging stopped.
            plots = self._write_plots(Path(run_dir))
            if plots:
                self._guard(self._log_plots, *plots)

    def _on_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        self._run.summary.update({k: v for k, v in summary.items() if v is not None})
        if getattr(self._run, "disabled", False):  # mode=disabled: a stand-in run without a folder
            return
        # A copy of summary.json among the W&B run's files (offline runs keep only a binary log otherwise).
        copy = Path(self._run.dir) / "presto_summary.json"
        copy.write_text(json.dumps(dict(summary), indent=2, default=str) + "\n")
        self._run.save(str(copy), base_path=self._run.dir, policy="now")

    @staticmethod
    def _write_plots(run_dir: Path) -> tuple[str, list[Path]] | None:
        """(the run's label, the figures written to RUN_DIR/plots), or None with a warning."""
        from presto.eval.plots import make_plots
        from presto.eval.runs import load_run

        try:
            run = load_run(run_dir)
            return run.label, make_plots([run], run_dir / "plots", max_tree_panels=10)
        except Exception as err:  # never fail a finished run because of its figures
            print(f"warning: the run's plots could not be drawn: {type(err).__name__}: {err}", file=sys.stderr)
            return None

    def _log_plots(self, label: str, written: list[Path]) -> None:
        import wandb

        from presto.eval.plots import slug

        if written:
            # Keys without the run's label, so that the runs of a sweep share one panel per figure.
            label = slug(label)
            self._log({f"plots/{p.stem.replace('_' + label, '')}": wandb.Image(str(p)) for p in written})

    def finish(self, exit_code: int = 0) -> None:
        """End the W&B run with the run's exit status (:func:`presto.runner.logging.exit_status`),
        so that W&B marks an interrupted or failed run as such rather than Finished; a run whose
        summary says it is incomplete is not marked Finished either."""
        exit_code = exit_code or int(self._complete is False)
        if self._run is not None:
            run, self._run = self._run, None
            try:
                run.finish(exit_code=exit_code)
            except Exception as err:
                print(f"warning: W&B finish failed: {type(err).__name__}: {err}", file=sys.stderr)
            if self._sync_hint:  # again at the end: the first notice is far up, among engine logs
                print(f"notice: this W&B run is offline; upload it with {self._sync_hint}", file=sys.stderr)
