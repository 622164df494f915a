"""Reading dataset rows: a local file (never the network) or the hub, first N rows.

Every failure becomes a one-line :class:`TaskDataError` naming the file and, where it is
known, the row, because a user who passed ``dataset.path=...`` needs to know which line
of which file to fix, not a 40-line traceback from inside ``datasets``.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from presto.tasks.base import TaskDataError

_JSON_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
_PARQUET_SUFFIXES = (".parquet",)
_CSV_SUFFIXES = (".csv",)
# what reading a (gzipped) text file can raise: a truncated .gz ends in EOFError, a
# corrupt one in zlib.error, and neither is an OSError
_READ_ERRORS = (OSError, UnicodeDecodeError, EOFError, zlib.error)


def num_prompts_from(cfg: Mapping[str, Any]) -> int | None:
    """``num_prompts`` as a positive int, or ``None`` for "all rows".

    Only a caller of the task API can ask for all rows (``None``, 0 or -1): the command line
    (``presto.config.validate``) takes an integer >= 1, so the message promises only that.
    """
    n = cfg.get("num_prompts", 20)
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int):
        raise TaskDataError(f"dataset.num_prompts must be an integer >= 1, got {n!r}")
    if n in (0, -1):
        return None
    if n < 1:
        raise TaskDataError(f"dataset.num_prompts must be an integer >= 1, got {n}")
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
    """No progress bars and no log lines from ``datasets`` while reading a small local file.

    Progress bars clutter run logs; its ``logger.error`` lines about a file it cannot read
    would come before (and repeat, at length) our own one-line error.
    """
    from datasets.utils import logging as ds_logging

    was_enabled = ds_logging.is_progress_bar_enabled()
    verbosity = ds_logging.get_verbosity()
    ds_logging.disable_progress_bar()
    ds_logging.set_verbosity(ds_logging.CRITICAL + 1)
    try:
        yield
    finally:
        ds_logging.set_verbosity(verbosity)
        if was_enabled:
            ds_logging.enable_progress_bar()


def _read_json_rows(path: Path, task: str) -> list[dict[str, Any]]:
    """Every row of a JSON array or JSONL file (optionally gzipped), each value as written.

    Not ``datasets``' json builder: a column mixing strings and numbers becomes a ``Json``
    feature that decodes every string that is itself JSON, so a correct answer "0.50"
    became "0.5", "null" became missing and a MATH interval "[-3, 7]" became a list.
    """
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        # utf-8-sig, as for CSV: Windows editors and PowerShell 5 save UTF-8 with a BOM, which
        # json.loads rejects ("Unexpected UTF-8 BOM"); a file without one reads the same.
        with opener(path, "rt", encoding="utf-8-sig") as fh:
            text = fh.read()
    except _READ_ERRORS as exc:
        raise _malformed(task, path, first_line(exc)) from exc
    stripped = text.lstrip()
    if not stripped:
        raise _malformed(task, path, "file is empty")
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _malformed(task, path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
        if not rows:
            raise _malformed(task, path, "the JSON array is empty (no rows)")
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise _malformed(task, path, f"row {i}: expected a JSON object, got {type(row).__name__}")
        return rows
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _malformed(task, path, _jsonl_error(text, lineno, exc)) from exc
        if not isinstance(row, dict):
            raise _malformed(task, path, f"line {lineno}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def _jsonl_error(text: str, lineno: int, exc: json.JSONDecodeError) -> str:
    """What is wrong with a line that does not parse: a valid JSON document spread over several
    lines (one object, e.g. ``{"rows": [...]}``) is not "invalid JSON", it is not a list of rows."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        return f"line {lineno}: invalid JSON ({exc.msg} at column {exc.colno})"
    kind = {dict: "object", str: "string"}.get(type(whole), "value")
    return f"the file is one JSON {kind} over several lines; expected a JSON array of objects or JSON Lines"


def _read_csv_rows(path: Path, task: str) -> list[dict[str, Any]]:
    """Every row of a CSV file with a header line (GPQA's gpqa_diamond.csv), values as strings.

    Empty cells are kept as "" (not missing): CSV cannot tell the two apart.
    """
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            header = reader.fieldnames
    except (*_READ_ERRORS, csv.Error) as exc:
        raise _malformed(task, path, first_line(exc)) from exc
    if not header:
        raise _malformed(task, path, "file is empty")
    for i, row in enumerate(rows):
        if None in row or None in row.values():  # more cells than the header, or fewer
            problem = f"row {i}: {len(header)} columns in the header, a different number in this row"
            raise _malformed(task, path, problem)
    return rows


def _malformed(task: str, path: Path, problem: str) -> TaskDataError:
    """The one-line error for a local file that cannot be read as rows."""
    return TaskDataError(f"{task}: {path}: malformed file: {problem}")


def _parquet_row_count(path: Path, task: str) -> int:
    """The row count from the parquet footer; an unreadable file fails here, in one line."""
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path).num_rows
    except Exception as exc:
        raise TaskDataError(f"{task}: {path}: cannot read as parquet: {first_line(exc)}") from exc


def _cache_dir_for(path: Path) -> str:
    """A ``datasets`` cache directory for exactly this file content (about 1 s per GB to hash)."""
    import datasets.config

    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "presto-local-files" / digest[:32])


def _read_local(path_str: str, task: str) -> Any:
    """Read a local file: JSON/JSONL/CSV as a list of dicts, parquet with ``datasets`` offline.

    JSON and CSV are read with the standard library, so every value stays as written (see
    :func:`_read_json_rows`). For parquet, ``datasets`` keys its cache of a local file on
    the path and the modification time, so a file rewritten within the same second (or
    copied with its timestamps kept) would load the old rows. Each content therefore gets its
    own cache directory, named by its hash: a changed file can only ever find its own rows.
    """
    path = Path(path_str).expanduser()
    if path.is_dir():  # exists, so "not found" would send the user looking in the wrong place
        raise TaskDataError(f"{task}: {path} is a directory; dataset.path must name a data file in it")
    if not path.is_file():
        raise TaskDataError(f"{task}: dataset file not found: {path}")
    name = path.name.lower()
    if name.endswith(_JSON_SUFFIXES):
        return _read_json_rows(path, task)
    if name.endswith(_CSV_SUFFIXES):
        return _read_csv_rows(path, task)
    if not name.endswith(_PARQUET_SUFFIXES):
        allowed = ", ".join(_JSON_SUFFIXES + _CSV_SUFFIXES + _PARQUET_SUFFIXES)
        raise TaskDataError(f"{task}: {path}: unsupported file type (allowed: {allowed})")
    if _parquet_row_count(path, task) == 0:  # else datasets says only "An error occurred while generating"
        raise TaskDataError(f"{task}: {path}: no rows")
    with offline(), quiet_datasets():
        import datasets

        try:
            return datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=_cache_dir_for(path))
        except Exception as exc:
            raise TaskDataError(f"{task}: {path}: cannot read as parquet: {first_line(exc)}") from exc


def hub_source(cfg: Mapping[str, Any]) -> str:
    """What a hub load reads, for messages: the repository, or the data files when ``hub_id``
    is one of ``datasets``' packaged builders (``json`` reading ``hf://datasets/...`` files)."""
    hub_id = str(cfg.get("hub_id"))
    files = _hub_data_files(cfg)
    return ", ".join(files) if files and "/" not in hub_id else hub_id


def _hub_data_files(cfg: Mapping[str, Any]) -> list[str]:
    files = cfg.get("hub_data_files") or []
    return [files] if isinstance(files, str) else [str(f) for f in files]  # one name, not its letters


def _read_hub(cfg: Mapping[str, Any], task: str, default_split: str) -> Any:
    """Load from the hub; any failure (offline, gated, renamed) says to pass dataset.path.

    ``hub_id`` is a hub repository, or a packaged builder such as ``json`` with
    ``hub_data_files`` as ``hf://datasets/<repo>/<file>`` URLs: the way to read a repository
    that ships a loading script, which ``datasets`` >= 4 refuses to run.
    """
    hub_id = cfg.get("hub_id")
    if not hub_id:
        raise TaskDataError(f"{task}: no dataset.path and no dataset.hub_id; pass dataset.path=/path/to/file.jsonl")
    import datasets

    kwargs: dict[str, Any] = {"split": cfg.get("split") or default_split}
    if cfg.get("hub_data_files"):
        kwargs["data_files"] = _hub_data_files(cfg)
    args: list[Any] = [hub_id]
    if cfg.get("hub_config"):
        args.append(cfg["hub_config"])
    try:
        return datasets.load_dataset(*args, **kwargs)
    except Exception as exc:
        raise TaskDataError(
            f"{task}: could not load {hub_source(cfg)!r} from the hub ({first_line(exc)}); "
            f"pass dataset.path=/path/to/file (JSON/JSONL/CSV/parquet in the hub's column layout)"
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
        source = hub_source(cfg)
    count = len(ds) if n is None else min(n, len(ds))
    if count == 0:
        raise TaskDataError(f"{task}: {source}: no rows")
    rows = ds[:count] if isinstance(ds, list) else ds.select(range(count)).to_list()
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
