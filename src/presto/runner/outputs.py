"""The run directory: chains.jsonl (appended and flushed per chain), trees.jsonl, summary.json."""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import numpy as np


def _plain(value: Any) -> Any:
    """JSON-safe values: numpy scalars and arrays to Python, non-finite floats to null."""
    if isinstance(value, dict):  # keys named as json names them (True -> "true", None -> "null")
        return {json.dumps(k) if isinstance(k, bool) or k is None else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):  # any numpy scalar (np.bool_ included: json refuses it) as its Python value
        value = value.item()
    if isinstance(value, float | np.floating):  # np.longdouble stays numpy through .item()
        return float(value) if math.isfinite(value) else None
    return value


def _numpy_default(value: Any) -> Any:
    """json's hook for what it cannot write itself: numpy values, as :func:`_plain` makes them."""
    if isinstance(value, np.ndarray | np.generic):
        return _plain(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(record: dict[str, Any]) -> str:
    """One JSON line. Records are mostly finite Python values, written directly (numpy values
    through the hook); one holding a non-finite float, or a numpy dict key, is made plain first."""
    try:
        return json.dumps(record, allow_nan=False, default=_numpy_default)
    except (ValueError, TypeError):
        return json.dumps(_plain(record), allow_nan=False)


def write_text_atomic(path: Path, text: str, *, durable: bool = True) -> None:
    """Write to a temporary sibling, then rename: readers (and a kill midway) never see half a file.

    ``durable=False`` skips the fsync (milliseconds each): the file still survives the process
    being killed, not a power loss; for a small file rewritten very often.
    """
    write_lines_atomic(path, (text,), durable=durable)


def write_lines_atomic(path: Path, lines: Iterable[str], *, durable: bool = True) -> None:
    """:func:`write_text_atomic` of the concatenated ``lines``, written as they come (a long log
    is never held whole in memory)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w") as handle:
            handle.writelines(lines)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, a directory in the way, Ctrl-C: leave no half-written sibling
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_path(path.parent)  # the rename itself


def fsync_path(path: Path) -> None:
    """Flush a file's or a folder's contents to disk (a folder's: its entries, so that a rename in
    it survives a power loss, as POSIX asks). A folder that cannot be opened (Windows) or synced
    (some network filesystems) is left as it is: the rename still survives the process being killed."""
    folder = path.is_dir()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if folder:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not folder:  # on a file the fsync is real
            raise
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(_plain(data), indent=2, allow_nan=False) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (a killed run) is ignored.

    Another line that is not JSON (the file damaged after the fact: the writers rewrite a torn
    line away before they append) is skipped with a warning naming it, not silently.
    """
    return list(iter_jsonl(path))


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """:func:`read_jsonl`'s records one at a time, read line by line: trees.jsonl grows by tens of
    KB a round, and a long run's would not fit in memory as parsed records (several times its size)."""
    for _, record in numbered_jsonl(path):
        yield record


def numbered_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """:func:`iter_jsonl`'s records with their line numbers (1-based)."""
    for number, record, _ in jsonl_lines(path):
        yield number, record


def jsonl_lines(path: Path) -> Iterator[tuple[int, Any, str]]:
    """:func:`numbered_jsonl`'s records with the text of their lines (newline included), for a
    rewrite that keeps a record as it is: serializing it again would cost more than parsing it."""
    if not path.exists():
        return
    bad: int | None = None  # a line that is not JSON: warned about once a line follows it (else torn)
    with path.open() as handle:
        for number, line in enumerate(handle, 1):
            if bad is not None:
                print(f"warning: {path}: line {bad} is not JSON; skipped", file=sys.stderr)
                bad = None
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if line.strip():
                    bad = number
                continue
            yield number, record, line if line.endswith("\n") else line + "\n"


def count_jsonl(path: Path) -> int:
    """How many records :func:`read_jsonl` would return, holding one at a time."""
    return sum(1 for _ in iter_jsonl(path))


def _exclusive_lock(run_dir: Path) -> TextIO | None:
    """Hold ``run_dir/.lock`` for the run: a second process writing the same directory would
    interleave its chains with ours (e.g. two jobs given one explicit hydra.run.dir)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return None
    handle = (run_dir / ".lock").open("a")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise FileExistsError(f"another run is writing to {run_dir} now; give this one its own directory") from None
    except OSError as err:
        handle.close()
        if err.errno not in _NO_LOCKING:
            raise
        # Some network and FUSE filesystems have no flock: the run goes on, only unguarded.
        print(
            f"warning: cannot lock {run_dir} ({os.strerror(err.errno)}): make sure no other run writes there",
            file=sys.stderr,
        )
        return None
    return handle


# errno values of a filesystem that does not support flock (as opposed to a lock held by another process).
_NO_LOCKING = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}


@contextmanager
def signals_held(signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, so that it runs whole.

    The run writes a chain's record (then fsyncs it, which can take a while) and counts it in
    the summary's totals: an interrupt between the two would leave chains.jsonl holding a chain
    the interrupted run's summary.json does not count. A signal that arrives meanwhile is
    delivered, and raises, as the block ends.

    Python runs signal handlers in the main thread whichever thread the kernel delivers a signal
    to, so the block swaps in handlers that only note the signal. (Masking it in the main thread
    would not do: with other threads running, as torch's, vLLM's or a joblib worker's are, the
    kernel delivers it to one of them and the handler still runs inside the block.) Outside the
    main thread, where handlers cannot be set, or for a handler not set from Python, the block
    runs unguarded for that signal.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    held: dict[int, Any] = {}  # the handlers swapped out, by signal
    open_ = [True]

    def note(signum, frame):
        if open_[0]:
            arrived.append(signum)
            return
        # The block is over, but a signal between two restores below left this handler in place:
        # hand the signal to the handler it replaced.
        signal.signal(signum, held[signum])
        signal.raise_signal(signum)

    try:
        for signum in signums:
            handler = signal.getsignal(signum)
            if handler is not None:  # None: not set from Python, so it could not be set back
                held[signum] = handler
                signal.signal(signum, note)
        yield
    finally:
        open_[0] = False
        for signum, handler in held.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(arrived):  # each once, in order of arrival
            signal.raise_signal(signum)


DELETE = object()
"""A value of :meth:`RunWriter.amend_chains` that removes its key from the record."""


def _chain_key(record: dict[str, Any]) -> tuple[str, int]:
    return str(record.get("prompt_id")), int(record.get("chain", -1))


def chain_key_problem(record: Any) -> str | None:
    """Why a parsed chains.jsonl line names no chain (a str prompt_id, an int chain index), or None."""
    if not isinstance(record, dict):
        return f"not a chain record (a JSON {type(record).__name__})"
    if not isinstance(record.get("prompt_id"), str):
        return "not a chain record (no prompt_id)"
    chain = record.get("chain")
    if not isinstance(chain, int) or isinstance(chain, bool) or chain < 0:
        return "not a chain record (no chain index)"
    return None


# Where a resume moves chains.jsonl lines it cannot count (see RunWriter._read_previous).
DROPPED_CHAINS = "chains.dropped.jsonl"


class RunWriter:
    """Owns the output files of one run directory."""

    @staticmethod
    def check(run_dir: Path, resume: bool) -> None:
        """Refuse to mix a new run into a directory that already holds chains."""
        chains = run_dir / "chains.jsonl"
        if not resume and chains.exists() and chains.stat().st_size > 0:
            raise FileExistsError(
                f"{chains} already holds chains: pass run.resume=true to continue it, or another output "
                "directory (hydra.run.dir; hydra.sweep.dir with -m)"
            )

    def __init__(
        self,
        run_dir: Path,
        resume: bool,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        check: Callable[[Any], str | None] = chain_key_problem,
    ) -> None:
        """``keep``: what the run needs of each chain an earlier session finished (``previous``);
        the records whole without it. A paper-scale record is over 100 KB parsed (its tokens,
        text and per-transition lists), so a resumed run of thousands of chains keeps less.
        ``check``: why a parsed line is no record the run can take, or None (by default, one
        that names its chain)."""
        self._check = check
        self.run_dir = run_dir
        self.chains_path = run_dir / "chains.jsonl"
        self.trees_path = run_dir / "trees.jsonl"
        self.summary_path = run_dir / "summary.json"
        self.check(run_dir, resume)
        run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _exclusive_lock(run_dir)
        try:
            # The chains an earlier session finished (as ``keep`` reduces them), until the run takes them.
            self.previous: list[dict[str, Any]] = []
            self._finished: set[tuple[str, int]] = set()  # filled as the earlier records are read
            if resume:
                # Rewritten a record at a time, dropping a torn last line so appends start on a clean
                # line; then the rounds of chains that did not finish: they run again from their
                # start and log those rounds anew.
                write_lines_atomic(self.chains_path, self._read_previous(keep))
                finished = self.finished()
                # Streamed, and each kept round copied as written: a long run's trees.jsonl is GBs.
                trees = (
                    line
                    for _, tree, line in jsonl_lines(self.trees_path)
                    # A line naming no chain (damaged, or edited by hand) belongs to no finished chain.
                    if chain_key_problem(tree) is None and _chain_key(tree) in finished
                )
                write_lines_atomic(self.trees_path, trees)
            self._chains: TextIO = self.chains_path.open("a")
            # A new run starts its tree log afresh (an earlier attempt may have died before any chain finished).
            self._trees: TextIO = self.trees_path.open("a" if resume else "w")
        except BaseException:
            # A resume that cannot read or rewrite the files (a full disk, Ctrl-C) must not keep
            # the directory locked until the garbage collector closes the handle.
            for handle in (getattr(self, "_chains", None), self._lock):
                if handle is not None:
                    handle.close()
            raise

    def _read_previous(self, keep: Callable[[dict[str, Any]], dict[str, Any]] | None) -> Iterator[str]:
        """chains.jsonl's lines, rewritten, as its records are read into ``previous``.

        A line that is JSON but no chain record (the file edited by hand), and a chain's second
        record (a hand merge, or an older version's resume), would make the summary's totals wrong:
        each is moved to chains.dropped.jsonl with a warning naming its line (lines that are not
        JSON are skipped, as :func:`iter_jsonl` says).
        """
        dropped: TextIO | None = None
        try:
            for number, record in numbered_jsonl(self.chains_path):
                problem = chain_key_problem(record) or self._check(record)
                if problem is None and _chain_key(record) in self._finished:
                    problem = f"a second record of chain {record['chain']} of {record['prompt_id']} (the first is kept)"
                if problem is not None:
                    dropped = dropped or (self.run_dir / DROPPED_CHAINS).open("a")
                    dropped.write(json.dumps(record) + "\n")
                    print(
                        f"warning: {self.chains_path}: line {number} is {problem}; moved to {DROPPED_CHAINS}",
                        file=sys.stderr,
                    )
                    continue
                self._finished.add(_chain_key(record))
                self.previous.append(record if keep is None else keep(record))
                yield dumps(record) + "\n"
        finally:
            if dropped is not None:
                dropped.close()

    def finished(self) -> set[tuple[str, int]]:
        """The (prompt_id, chain) of every chain in chains.jsonl, this session's appended ones too."""
        return set(self._finished)

    def take_previous(self) -> list[dict[str, Any]]:
        """Hand over the earlier session's chain records and forget them here.

        The run keeps only each chain's summary figures, so the writer must not hold even the
        reduced records for the whole run.
        """
        records, self.previous = self.previous, []
        return records

    def amend_chains(self, changes: Mapping[int, Mapping[str, Any]]) -> None:
        """Rewrite chains.jsonl (atomically, a record at a time) with ``changes[i]`` applied to its
        i-th record (0-based, as ``previous`` lists them; a value :data:`DELETE` removes its key),
        and append to the new file from now on."""
        self._chains.close()  # its handle points at the file the rename replaces

        def amended() -> Iterator[str]:
            for position, record in enumerate(iter_jsonl(self.chains_path)):
                for key, value in changes.get(position, {}).items():
                    if value is DELETE:
                        record.pop(key, None)
                    else:
                        record[key] = value
                yield dumps(record) + "\n"

        write_lines_atomic(self.chains_path, amended())
        self._chains = self.chains_path.open("a")

    def append_chain(self, record: dict[str, Any]) -> None:
        self._chains.write(dumps(record) + "\n")
        self._chains.flush()
        os.fsync(self._chains.fileno())
        self._finished.add(_chain_key(record))

    def append_tree(self, record: dict[str, Any]) -> None:
        self._trees.write(dumps(record) + "\n")

    def flush_trees(self) -> None:
        """Make a chain's rounds durable; the run calls it before appending that chain's record.

        A resume takes every chain in chains.jsonl (fsynced) as finished and never runs it again,
        so its rounds must reach the disk first: a machine crash between the two would lose them.
        """
        self._trees.flush()
        os.fsync(self._trees.fileno())

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json_atomic(self.summary_path, summary)

    def close(self) -> None:
        """Close every file, the lock last (closing it releases it), even when one cannot be
        flushed (a full disk): the first error is raised once all are closed."""
        error: OSError | None = None
        for handle in (self._chains, self._trees, self._lock):
            if handle is not None and not handle.closed:
                try:
                    handle.close()
                except OSError as err:
                    error = error or err
        if error is not None:
            raise error
