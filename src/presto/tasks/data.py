"""Reading dataset rows: a local file (never the network) or the hub, first N rows.

Every failure becomes a one-line :class:`TaskDataError` naming the file and, where it is
known, the row, because a user who passed ``dataset.path=...`` needs to know which line
of which file to fix, not a 40-line traceback from inside ``datasets``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from presto.tasks.base import TaskDataError

_JSON_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
_PARQUET_SUFFIXES = (".parquet",)


def num_prompts_from(cfg: Mapping[str, Any]) -> int | None:
    """``num_prompts`` as a positive int, or ``None`` for "all" (null, 0 or -1 in the yaml)."""
    n = cfg.get("num_prompts", 20)
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int):
        raise TaskDataError(f"dataset.num_prompts must be an integer >= 1 or null (all), got {n!r}")
    if n in (0, -1):
        return None
    if n < 1:
        raise TaskDataError(f"dataset.num_prompts must be an integer >= 1 or null (all), got {n}")
    return n


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception message, prefixed by its type."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else '(no message)'}"


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """Forbid every hub access of ``datasets``/``huggingface_hub`` inside the block.

    The environment variables are only read when those libraries are imported, so the
    already-imported config flags are flipped too, and everything is restored after.
    """
    saved_env = {k: os.environ.get(k) for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    patched: list[tuple[Any, str, Any]] = []
    try:
        import datasets.config as ds_config

        for attr in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
            if hasattr(ds_config, attr):
                patched.append((ds_config, attr, getattr(ds_config, attr)))
                setattr(ds_config, attr, True)
        with contextlib.suppress(ImportError):
            import huggingface_hub.constants as hub_constants

            if hasattr(hub_constants, "HF_HUB_OFFLINE"):
                patched.append((hub_constants, "HF_HUB_OFFLINE", hub_constants.HF_HUB_OFFLINE))
                hub_constants.HF_HUB_OFFLINE = True
        yield
    finally:
        for module, attr, value in reversed(patched):
            setattr(module, attr, value)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """No progress bars from ``datasets`` while reading a small local file (they clutter run logs)."""
    from datasets.utils import logging as ds_logging

    was_enabled = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            ds_logging.enable_progress_bar()


def _locate_json_error(path: Path) -> str | None:
    """Find the first unreadable row of a JSON/JSONL file, for the error message."""
    import gzip

    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        return first_line(exc)
    stripped = text.lstrip()
    if not stripped:
        return "file is empty"
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            return f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        if not rows:
            return "the JSON array is empty (no rows)"
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                return f"row {i}: expected a JSON object, got {type(row).__name__}"
        return None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            return f"line {lineno}: invalid JSON ({exc.msg} at column {exc.colno})"
        if not isinstance(row, dict):
            return f"line {lineno}: expected a JSON object, got {type(row).__name__}"
    return None


def _cache_dir_for(path: Path) -> str:
    """A ``datasets`` cache directory for exactly this file content (about 1 s per GB to hash)."""
    import datasets.config

    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "presto-local-files" / digest[:32])


def _read_local(path_str: str, task: str) -> Any:
    """Read a local JSON/JSONL/parquet file with ``datasets``, with the network forbidden.

    ``datasets`` keys its cache of a local file on the path and the modification time, so a
    file rewritten within the same second (or copied with its timestamps kept) would load
    the old rows. Each content therefore gets its own cache directory, named by its hash:
    a changed file can only ever find its own rows.
    """
    path = Path(path_str).expanduser()
    if not path.is_file():
        raise TaskDataError(f"{task}: dataset file not found: {path}")
    name = path.name.lower()
    if name.endswith(_JSON_SUFFIXES):
        builder = "json"
    elif name.endswith(_PARQUET_SUFFIXES):
        builder = "parquet"
    else:
        allowed = ", ".join(_JSON_SUFFIXES + _PARQUET_SUFFIXES)
        raise TaskDataError(f"{task}: {path}: unsupported file type (allowed: {allowed})")
    if builder == "json":
        problem = _locate_json_error(path)
        if problem is not None:
            raise TaskDataError(f"{task}: {path}: malformed file: {problem}")
    with offline(), quiet_datasets():
        import datasets

        try:
            return datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=_cache_dir_for(path))
        except Exception as exc:
            raise TaskDataError(f"{task}: {path}: cannot read as {builder}: {first_line(exc)}") from exc


def _read_hub(cfg: Mapping[str, Any], task: str, default_split: str) -> Any:
    """Load from the hub; any failure (offline, gated, renamed) says to pass dataset.path."""
    hub_id = cfg.get("hub_id")
    if not hub_id:
        raise TaskDataError(f"{task}: no dataset.path and no dataset.hub_id; pass dataset.path=/path/to/file.jsonl")
    import datasets

    kwargs: dict[str, Any] = {"split": cfg.get("split") or default_split}
    if cfg.get("hub_data_files"):
        kwargs["data_files"] = list(cfg["hub_data_files"])
    args: list[Any] = [hub_id]
    if cfg.get("hub_config"):
        args.append(cfg["hub_config"])
    try:
        return datasets.load_dataset(*args, **kwargs)
    except Exception as exc:
        raise TaskDataError(
            f"{task}: could not load {hub_id!r} from the hub ({first_line(exc)}); "
            f"pass dataset.path=/path/to/file (JSON/JSONL/parquet in the hub's column layout)"
        ) from exc


def load_rows(
    cfg: Mapping[str, Any],
    *,
    task: str,
    required: Sequence[str],
    default_split: str = "test",
) -> tuple[list[dict[str, Any]], str]:
    """Return the first ``num_prompts`` rows as dicts, and a label of where they came from.

    Every row must have each ``required`` field (present and not null); the first one that
    does not is reported with its row number.
    """
    n = num_prompts_from(cfg)
    path = cfg.get("path")
    if path:
        ds = _read_local(str(path), task)
        source = str(Path(str(path)).expanduser())
    else:
        ds = _read_hub(cfg, task, default_split)
        source = str(cfg.get("hub_id"))
    count = len(ds) if n is None else min(n, len(ds))
    if count == 0:
        raise TaskDataError(f"{task}: {source}: no rows")
    rows = ds.select(range(count)).to_list()
    for i, row in enumerate(rows):
        missing = [key for key in required if row.get(key) is None]
        if missing:
            present = ", ".join(k for k, v in row.items() if v is not None) or "none"
            raise TaskDataError(
                f"{task}: {source} row {i}: missing field(s) {', '.join(map(repr, missing))} (has: {present})"
            )
    return rows, source


def require(row: Mapping[str, Any], key: str, kind: type | tuple[type, ...], *, task: str, source: str, i: int) -> Any:
    """Return ``row[key]`` if it has the expected type, else a one-line error naming the row."""
    value = row.get(key)
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise TaskDataError(f"{task}: {source} row {i}: field {key!r} should be {names}, got {value!r:.80}")
    return value
