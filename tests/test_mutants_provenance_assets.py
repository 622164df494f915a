"""Tests that kill the mutants a hand mutation review of the predictor provenance and the model assets
found surviving.

Ids of the review: V = predictor/provenance.py (what a checkpoint was trained on, and how a run's
sampler differs from it), M = models/assets.py (model.path resolution, the converted-GGUF cache, the
tiny test model). Each test names the mutants it kills; the full list, with what killed each one and
why the survivors are equivalent, is at the end of the file. Everything here is a pure function, or a
cache filled by a stub converter in a temporary folder, except the last tests, which build one tiny
model (and convert it as if a GGUF held it). Nothing touches ~/.cache/presto or a model hub.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.machinery
import json
import os
import stat
from pathlib import Path
from types import MappingProxyType

os.environ["HF_HUB_OFFLINE"] = "1"  # before anything imports huggingface_hub

import numpy as np
import pytest
from omegaconf import OmegaConf

from presto.config import SamplerSettings
from presto.models import (
    DEFAULT_MODEL,
    ModelNotFoundError,
    assets,
    cache_root,
    embedded_gguf_path,
    is_complete,
    make_tiny_model,
    resolve_model_dir,
)
from presto.predictor.provenance import parse_provenance, provenance_mismatch, tau_as_meant

# --- predictor/provenance.py: what a checkpoint says it was trained on ----------------------------


def test_a_provenance_of_the_trained_shape_is_kept_and_any_other_is_not_trusted():
    """V1 (composition required: a provenance of samplers alone refused), V2 (sampler names not
    checked), V3 (`all` -> `any` over the parts), V43 (sampler_settings not checked), V4 (the samplers
    list handed back without a copy)."""
    samplers = ["powermh"]
    parsed = parse_provenance({"samplers": samplers})
    assert parsed == {"samplers": ["powermh"], "composition": [], "sampler_settings": []}
    parsed["samplers"].append("entropycut")  # the caller's copy: the checkpoint's hyperparameter is untouched
    assert samplers == ["powermh"]
    good = {"samplers": ["powermh"], "composition": [{"sampler": "powermh"}], "sampler_settings": [{"name": "powermh"}]}
    assert parse_provenance(good) == good
    for key, bad in (
        ("samplers", ["powermh", 4]),
        ("samplers", "powermh"),
        ("composition", [{"sampler": "powermh"}, "bfs"]),
        ("composition", {"sampler": "powermh"}),
        ("sampler_settings", [{"name": "powermh"}, None]),
        ("sampler_settings", "powermh"),
    ):
        assert parse_provenance({**good, key: bad}) is None, (key, bad)
    assert parse_provenance(None) is None and parse_provenance(["powermh"]) is None


def test_tau_null_stands_for_one_over_alpha_only_where_that_is_a_finite_number():
    """V9 (a tau that is given replaced by 1/alpha), V10 (a section without tau: KeyError), V8 (alpha 0
    admitted: ZeroDivisionError), V11 (alpha not checked to be a number: TypeError), V12 (no guard for
    an int beyond floats: OverflowError), V13 (no finiteness check: tau = inf for a subnormal alpha),
    V22 (a bool counted as a number: alpha True gave tau 1.0), V49 (the caller's section modified)."""
    section = {"name": "powermh", "alpha": 4, "tau": None, "block_size": 4}
    assert tau_as_meant(section) == {"name": "powermh", "alpha": 4, "tau": 0.25, "block_size": 4}
    assert section["tau"] is None  # a new mapping: the caller's is left as it was
    assert tau_as_meant({"alpha": 4, "tau": 0.5}) == {"alpha": 4, "tau": 0.5}
    assert tau_as_meant({"alpha": 4}) == {"alpha": 4}
    for alpha in (0, -2.0, "4", None, True, float("nan"), 10**400, 5e-324):
        assert tau_as_meant({"alpha": alpha, "tau": None}) == {"alpha": alpha, "tau": None}, alpha
    assert tau_as_meant({"alpha": 10**300, "tau": None})["tau"] == 1e-300


def trained_on(*settings: dict, composition: list | None = None, samplers=("powermh",)) -> dict:
    """A provenance of powermh trees (unless ``samplers`` says otherwise) whose composition counts
    exactly the runs ``settings`` record, one BFS part per sampler, unless ``composition`` is given."""
    if composition is None:
        counts: dict[str, int] = {}
        for setting in settings:
            counts[setting["name"]] = counts.get(setting["name"], 0) + setting["runs"]
        composition = [{"sampler": name, "traversal": "bfs", "runs": runs} for name, runs in counts.items()]
    return {"samplers": list(samplers), "composition": composition, "sampler_settings": list(settings)}


def powermh_setting(runs: int = 1, **keys) -> dict:
    """A PowerMH setting as training records it (config.yaml's sampler section less steps)."""
    return {"name": "powermh", "alpha": 4, "tau": None, "max_new_tokens": 8, "block_size": 4, "runs": runs, **keys}


def test_the_nearest_setting_is_named_key_by_key_in_order_with_each_trained_value_once():
    """V33 (`min` -> `max`) and V33b (the first setting taken, not the nearest), V35 (a value that several
    settings had named once per setting), V34 (the run's keys looked up in a setting that lacks one:
    KeyError), V39 (the keys left in set order, not sorted), V47 (settings counted, not their runs), V27
    (the trained samplers not named in their recorded order)."""
    far = powermh_setting(alpha=2, max_new_tokens=16, block_size=8)
    middle = powermh_setting(runs=2, alpha=4.0, tau=0.25, block_size=2)
    near = {key: value for key, value in powermh_setting().items() if key != "block_size"}  # an older record
    provenance = trained_on(far, middle, near)
    run = SamplerSettings("powermh", 3.0, 1 / 3, 8, 4, 6, {})
    assert provenance_mismatch(provenance, run) == (
        "trained on powermh trees of another setting: "
        "sampler.alpha (trained 2, 4, this run 3), sampler.tau (trained 0.5, 0.25, this run 0.333333)"
    )
    # A setting that differs in many keys names them all, sorted (a set's order would vary by process).
    run = SamplerSettings("powermh", 2.0, 0.5, 16, 8, 6, {"beta": 1.0, "uniform_mix": 0.5})
    provenance = trained_on(powermh_setting(beta=4, uniform_mix=0.1))
    assert provenance_mismatch(provenance, run) == (
        "trained on powermh trees of another setting: sampler.alpha (trained 4, this run 2), "
        "sampler.beta (trained 4, this run 1), sampler.block_size (trained 4, this run 8), "
        "sampler.max_new_tokens (trained 8, this run 16), sampler.tau (trained 0.25, this run 0.5), "
        "sampler.uniform_mix (trained 0.1, this run 0.5)"
    )
    provenance = trained_on(powermh_setting(), samplers=("entropycut", "powermh"))
    run = SamplerSettings("multitry", 4.0, 0.25, 8, 4, 6, {"num_candidates": 2})
    expected = "trained on entropycut, powermh trees, while this run samples with multitry"
    assert provenance_mismatch(provenance, run) == expected


def test_a_key_only_some_settings_recorded_is_named_with_the_values_of_those_that_did():
    """V36 (every setting read for the named key: KeyError on one that lacks it)."""
    no_block = {key: value for key, value in powermh_setting(alpha=2).items() if key != "block_size"}
    provenance = trained_on(powermh_setting(block_size=8), powermh_setting(max_new_tokens=16, block_size=2), no_block)
    run = SamplerSettings("powermh", 4.0, 0.25, 8, 4, 6, {})
    assert provenance_mismatch(provenance, run) == (
        "trained on powermh trees of another setting: sampler.block_size (trained 8, 2, this run 4)"
    )


def test_only_the_runs_sampler_counts_and_a_setting_is_compared_once_every_run_of_it_recorded_one():
    """V28 (other samplers' settings compared too: an EntropyCut setting at the run's alpha hid the
    mismatch), V29 (other samplers' runs counted: the run's looked unrecorded), V46 (composition parts
    counted, not their runs), V21 (an infinite count not read as 0: OverflowError), V31 (more recorded
    runs than the composition counts, or no composition at all, read as unrecorded), V32 (no setting
    recorded: min() of nothing), V26b (an empty sampler list named as "trained on  trees")."""
    entropycut = {"name": "entropycut", "alpha": 2, "tau": None, "max_new_tokens": 8, "beta": 4, "runs": 3}
    settings = [entropycut, powermh_setting(runs=2)]
    composition = [
        {"sampler": "entropycut", "traversal": "bfs", "runs": 3},
        {"sampler": "powermh", "traversal": "bfs", "runs": 1},
        {"sampler": "powermh", "traversal": "dfs", "runs": 1},
    ]
    provenance = trained_on(*settings, composition=composition, samplers=("entropycut", "powermh"))
    run = SamplerSettings("powermh", 2.0, 0.5, 8, 4, 6, {})
    expected = "trained on powermh trees of another setting: sampler.alpha (trained 4, this run 2), "
    expected += "sampler.tau (trained 0.25, this run 0.5)"
    assert provenance_mismatch(provenance, run) == expected
    # Three runs of powermh, two settings recorded: the third run's may have been this run's.
    provenance["composition"] = [{"sampler": "powermh", "traversal": "bfs", "runs": 3}]
    assert provenance_mismatch(provenance, run) is None
    # Counts that are not finite numbers are none: compared, never a crash.
    for count in (float("inf"), float("nan"), None):
        provenance["composition"] = [{"sampler": "powermh", "traversal": "bfs", "runs": count}]
        assert provenance_mismatch(provenance, run) == expected, count
    # A provenance without a composition (a hand-edited file) still compares the settings it has ...
    no_composition = parse_provenance({"samplers": ["powermh"], "sampler_settings": settings})
    assert provenance_mismatch(no_composition, run) == expected
    # ... and one without settings (or with no sampler) has nothing to compare.
    assert provenance_mismatch(parse_provenance({"samplers": ["powermh"]}), run) is None
    assert provenance_mismatch(trained_on(samplers=()), run) is None


def test_values_are_compared_up_to_rounding_lists_element_wise_and_shown_as_written():
    """V17 (numbers compared exactly: tau=0.333333333333 at alpha 3 differed from 1/3), V18 (a tolerance
    of 1e-2: alpha 4.01 passed for 4), V20 (a tuple never equal to the list JSON gave back), V19 (lists
    of another length zipped strictly: ValueError), V24 (a list shown with Python's float reprs), V22 (a
    bool shown as a number)."""
    provenance = trained_on(powermh_setting(alpha=3, temperatures=[0.5, 1], greedy=False))
    run = SamplerSettings("powermh", 3.0, 0.333333333333, 8, 4, 6, {"temperatures": (0.5, 1.0), "greedy": False})
    assert provenance_mismatch(provenance, run) is None
    run = SamplerSettings("powermh", 3.0000000001, 1 / 3, 8, 4, 6, {"temperatures": [0.5, 1.0], "greedy": False})
    assert provenance_mismatch(provenance, run) is None
    run = SamplerSettings("powermh", 3.01, 1 / 3.01, 8, 4, 6, {"temperatures": [0.5, 1.0, 2.0], "greedy": True})
    assert provenance_mismatch(provenance, run) == (
        "trained on powermh trees of another setting: sampler.alpha (trained 3, this run 3.01), "
        "sampler.greedy (trained False, this run True), "
        "sampler.tau (trained 0.333333, this run 0.332226), "
        "sampler.temperatures (trained [0.5, 1], this run [0.5, 1, 2])"
    )


def test_a_runs_sampler_section_may_be_any_mapping_with_tau_null_and_steps_as_in_config_yaml():
    """V50 (only a dict taken as a section: a read-only mapping read by attribute), V40 (the run's section
    compared as given: its tau null against the 0.25 it stands for), V16a (steps compared: K sets how long
    a chain runs, not its decisions), V42 (SamplerSettings' sampler-specific options dropped), V6b
    (block_size not read from SamplerSettings)."""
    trained = trained_on(powermh_setting(tau=0.25, steps=6, beta=4))
    section = {"name": "powermh", "alpha": 4.0, "tau": None, "max_new_tokens": 8, "block_size": 4, "steps": 10}
    for form in (section, MappingProxyType(section), OmegaConf.create(section)):
        assert provenance_mismatch(trained, form) is None, form
    assert provenance_mismatch(trained, MappingProxyType({**section, "beta": 2})) == (
        "trained on powermh trees of another setting: sampler.beta (trained 4, this run 2)"
    )
    run = SamplerSettings("powermh", 4.0, 0.25, 8, 2, 6, {"beta": 2})
    assert provenance_mismatch(trained, run) == (
        "trained on powermh trees of another setting: sampler.beta (trained 4, this run 2), "
        "sampler.block_size (trained 4, this run 2)"
    )


def test_runs_of_an_unknown_sampler_do_not_hide_a_setting_the_runs_own_sampler_never_had():
    """V26 (any unknown-sampler run silencing every comparison). Runs without summary.json and
    config.yaml make the sampler "unknown": they may be of a sampler the run's predictor was never
    trained on, so a run of such a sampler is not warned; but the trees of the run's own sampler were
    all recorded at another setting, and that is still said."""
    provenance = trained_on(powermh_setting(), samplers=("powermh", "unknown"))
    provenance["composition"].append({"sampler": "unknown", "traversal": "unknown", "runs": 1})
    assert provenance_mismatch(provenance, SamplerSettings("multitry", 4.0, 0.25, 8, 4, 6, {})) is None
    assert provenance_mismatch(provenance, SamplerSettings("powermh", 4.0, 0.25, 8, 4, 6, {})) is None
    assert provenance_mismatch(provenance, SamplerSettings("powermh", 4.0, 0.25, 16, 4, 6, {})) == (
        "trained on powermh trees of another setting: sampler.max_new_tokens (trained 8, this run 16)"
    )


# --- models/assets.py: where the cache is, what names a model, the fingerprint ---------------------


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def stub_converter(calls: list[tuple[Path, bool]]):
    """Stand-in for the real conversion: a minimal folder and its marker; records (gguf, require_chat_template)."""

    def convert(gguf: Path, out_dir: Path, require_chat_template: bool) -> None:
        calls.append((gguf, require_chat_template))
        (out_dir / "config.json").write_text("{}")
        (out_dir / assets._MARKER).write_text(json.dumps({"format_version": assets._FORMAT_VERSION}))

    return convert


def test_the_cache_root_expands_home_in_every_setting_and_an_empty_setting_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M2 (~ not expanded in PRESTO_CACHE_DIR), M2b (nor in cache_dir: a folder named "~" made under the
    working directory), M1 (model.cache_dir="" taken as a folder: the working directory)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRESTO_CACHE_DIR", "~/env-cache")
    assert cache_root() == tmp_path / "home" / "env-cache"
    assert cache_root("") == tmp_path / "home" / "env-cache"
    assert cache_root("~/arg-cache") == tmp_path / "home" / "arg-cache"


def fingerprint_by_the_docstring(content: bytes) -> str:
    """12 hex digits of SHA-256 over the size (as decimal digits), the first MiB and the last MiB."""
    mib = 1 << 20
    tail = content[max(mib, len(content) - mib) :]
    return hashlib.sha256(str(len(content)).encode() + content[:mib] + tail).hexdigest()[:12]


def test_the_gguf_fingerprint_is_the_documented_hash_and_skips_the_middle(tmp_path: Path) -> None:
    """M13c (the size not hashed), M13d (11 hex digits), M13e (2 MiB spans: a 3 MiB file hashed whole).
    The fingerprint names cache folders, so a change to it silently orphans every converted model."""
    rng = np.random.default_rng(0)
    mib = 1 << 20
    for size in (4, 1000, 3 * mib + 5):
        content = b"GGUF" + rng.integers(0, 256, size - 4, dtype=np.uint8).tobytes()
        path = tmp_path / f"m{size}.gguf"
        path.write_bytes(content)
        assert assets.gguf_fingerprint(path) == fingerprint_by_the_docstring(content), size
    middle = bytearray(content)
    middle[mib + mib // 2] ^= 0xFF  # a byte neither in the first nor in the last MiB
    path.write_bytes(bytes(middle))
    assert assets.gguf_fingerprint(path) == fingerprint_by_the_docstring(content)


def test_model_path_is_read_as_written_and_each_kind_of_wrong_path_says_what_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M14 (model.path not stripped: a blank path reported as missing, a padded folder not found), M15 (an
    upper-case .GGUF suffix not a GGUF), M18 (a relative GGUF path converted, and recorded, as relative),
    M19 (a nested relative path taken for a hub id), M19b (./name taken for a hub id), M20 (an existing
    file of another kind reported as missing), M23 (a file starting b"GGU" but not b"GGUF" converted)."""
    calls: list[tuple[Path, bool]] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", stub_converter(calls))
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model_dir(f"  {folder}\n", cache) == folder.resolve()
    with pytest.raises(ModelNotFoundError, match=r"model\.path is empty"):
        resolve_model_dir(" \t", cache)
    (tmp_path / "Model.Q8_0.GGUF").write_bytes(b"GGUF" + b"\0" * 60)
    converted = resolve_model_dir("Model.Q8_0.GGUF", cache)
    assert converted.parent == cache / "models" / "gguf" and converted.name.startswith("Model.Q8_0-64-")
    assert calls == [((tmp_path / "Model.Q8_0.GGUF").resolve(), False)]  # absolute: the marker names where it came from
    for missing in ("./missing", "weights/sub/model"):
        with pytest.raises(ModelNotFoundError, match="does not exist"):
            resolve_model_dir(missing, cache)
    (tmp_path / "model.bin").write_bytes(b"GGUF")
    with pytest.raises(ModelNotFoundError, match=r"is neither a model folder nor a \.gguf file"):
        resolve_model_dir("model.bin", cache)
    (tmp_path / "almost.gguf").write_bytes(b"GGUX" + b"\0" * 60)
    with pytest.raises(ModelNotFoundError, match="not a GGUF file"):
        resolve_model_dir("almost.gguf", cache)
    assert len(calls) == 1


def test_the_embedded_default_must_carry_a_chat_template_and_another_gguf_need_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M22 (the default converted without requiring its chat template), M22b (every GGUF required to
    carry one: a base model refused)."""
    calls: list[tuple[Path, bool]] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", stub_converter(calls))
    gguf = tmp_path / "base.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    monkeypatch.setattr(assets, "embedded_gguf_path", lambda: gguf)
    resolve_model_dir(DEFAULT_MODEL, tmp_path / "cache")
    resolve_model_dir(str(gguf), tmp_path / "cache")
    assert calls == [(gguf, True), (gguf, False)]


def test_the_embedded_gguf_is_the_first_location_that_holds_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M7 (a folder of the GGUF's name taken for the file)."""
    first, second = tmp_path / "a", tmp_path / "b"
    (first / assets._EMBEDDED_GGUF).mkdir(parents=True)
    second.mkdir()
    (second / assets._EMBEDDED_GGUF).write_bytes(b"GGUF")
    spec = importlib.machinery.ModuleSpec(assets._EMBEDDED_PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [str(first), str(second)]
    monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: spec)
    assert assets.embedded_gguf_path() == second / assets._EMBEDDED_GGUF


# --- models/assets.py: the cache of converted folders ------------------------------------------------


@pytest.mark.parametrize("marker", ["[2]", '"complete"', "2", "null"])
def test_a_marker_that_is_not_a_json_object_is_not_complete(tmp_path: Path, marker: str) -> None:
    """M9 (the marker assumed to be an object: AttributeError instead of a rebuild)."""
    (tmp_path / assets._MARKER).write_text(marker)
    assert not is_complete(tmp_path)


def test_a_complete_cache_is_served_from_a_folder_this_user_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M40 (the lock taken before the cache is found complete: a shared read-only cache refused)."""
    calls: list[tuple[Path, bool]] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", stub_converter(calls))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    monkeypatch.setattr(assets, "embedded_gguf_path", lambda: gguf)
    final = resolve_model_dir(DEFAULT_MODEL, tmp_path / "shared")
    real_access = os.access
    monkeypatch.setattr(assets.os, "access", lambda path, mode: "shared" not in str(path) and real_access(path, mode))
    assert resolve_model_dir(DEFAULT_MODEL, tmp_path / "shared") == final and len(calls) == 1


def test_a_published_folder_is_readable_by_every_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """M26 (owner-only modes left: mkdtemp's 0o700 folder), M26b (files made executable), M26c (the folder
    itself left 0o700)."""
    monkeypatch.setattr(assets, "_convert_gguf_into", stub_converter([]))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    final = resolve_model_dir(str(gguf), tmp_path / "cache")
    assert stat.S_IMODE(final.stat().st_mode) == 0o755
    assert {stat.S_IMODE(path.stat().st_mode) for path in final.iterdir()} == {0o644}


def test_when_another_process_published_first_its_folder_is_kept_and_ours_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M28 (our temporary folder left behind), M28b (a failed rename taken for a race lost even when the
    folder there is not complete)."""
    final, tmp = tmp_path / "model", tmp_path / ".model.tmp-ours"
    for folder, content in ((final, "theirs"), (tmp, "ours")):
        folder.mkdir()
        (folder / "config.json").write_text(content)
    assets._publish(tmp, final, lambda folder: (folder / "config.json").read_text() == "theirs")
    assert (final / "config.json").read_text() == "theirs" and not tmp.exists()
    # A rename that fails while no complete folder is there is an error, not a race lost.
    tmp.mkdir()
    (tmp / "config.json").write_text("ours")

    def cross_device(src, dst) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(assets.os, "replace", cross_device)
    with pytest.raises(OSError, match="cross-device"):
        assets._publish(tmp, tmp_path / "elsewhere", lambda folder: (folder / "config.json").is_file())


def test_a_full_disk_is_known_by_its_errno_and_nothing_else_is_called_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M42 (ENOSPC recognized by its message only, and another errno taken for it)."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    raised: list[OSError] = []

    def failing(gguf: Path, out_dir: Path, require_chat_template: bool) -> None:
        raise raised[-1]

    monkeypatch.setattr(assets, "_convert_gguf_into", failing)
    raised.append(OSError(errno.ENOSPC, "Plus de place sur le périphérique"))  # a localized strerror
    with pytest.raises(ModelNotFoundError, match="no space left to convert the model"):
        resolve_model_dir(str(gguf), tmp_path / "cache")
    raised.append(PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(PermissionError):
        resolve_model_dir(str(gguf), tmp_path / "cache")


def test_leftovers_of_other_folders_are_not_ours_to_remove(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """M44b (leftover patterns that match a sibling whose name starts with ours, or any stale folder):
    another conversion may be writing them under its own lock."""
    models = tmp_path / "models"
    others = [f".{DEFAULT_MODEL}-v2.tmp-live", ".other-model.stale-live", f".{DEFAULT_MODEL}.tmp-dead"]
    for name in others:
        (models / name).mkdir(parents=True)
    monkeypatch.setattr(assets, "_convert_gguf_into", stub_converter([]))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    monkeypatch.setattr(assets, "embedded_gguf_path", lambda: gguf)
    resolve_model_dir(DEFAULT_MODEL, tmp_path)
    assert sorted(p.name for p in models.iterdir() if p.is_dir()) == sorted([*others[:2], DEFAULT_MODEL])


# --- models/assets.py: the conversion's marker, the tokenizer, the tiny model ------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model built into a folder that exists and is empty (M46: refused as a foreign folder)."""
    folder = tmp_path_factory.mktemp("tiny")
    assert not any(folder.iterdir())
    return make_tiny_model(folder, seed=5)


def test_the_tokenizer_is_limited_to_the_models_context_and_each_caller_gets_its_own(tiny: Path) -> None:
    """M37 (the GGUF tokenizer's ~1e30 length limit saved), M33 (the cached tokenizer handed out itself:
    one caller's change is the next one's tokenizer)."""
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(str(tiny), local_files_only=True).model_max_length == 8192
    first = assets._load_gguf_tokenizer(embedded_gguf_path())
    first.model_max_length = 7
    assert assets._load_gguf_tokenizer(embedded_gguf_path()).model_max_length > 8192


def test_a_conversion_records_the_size_and_fingerprint_of_its_gguf(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M45 (no fingerprint in the marker: a GGUF of the same size served another's weights), M45b (no size:
    a marker that is_complete checks on the size alone when it has no fingerprint). The real
    _convert_gguf_into, with the tiny model and its tokenizer standing in for what the GGUF holds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setattr(assets, "_load_gguf_tokenizer", lambda gguf: AutoTokenizer.from_pretrained(str(tiny)))
    monkeypatch.setattr(assets, "_load_gguf_model", lambda gguf: AutoModelForCausalLM.from_pretrained(str(tiny)))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    out = resolve_model_dir(str(gguf), tmp_path / "cache")
    marker = json.loads((out / assets._MARKER).read_text())
    assert marker["source_size"] == 1028 and marker["source_fingerprint"] == assets.gguf_fingerprint(gguf)
    assert marker["format_version"] == assets._FORMAT_VERSION and is_complete(out, gguf)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(range(255, -1, -1)) * 4)  # the same size, other weights
    assert not is_complete(out, other)


def test_the_tiny_weights_are_the_documented_draw(tiny: Path) -> None:
    """M49 (parameters drawn in transformers' order, not by name), M51 (down_proj not scaled up), M52 (the
    variance-preserving std taken over the output dimension): one float64 normal stream seeded with the
    seed, parameter by parameter in name order; norms 1 + 0.1 z, the embedding 0.6 z, linear layers
    z / sqrt(fan_in), times 4 for the residual writes (o_proj, down_proj)."""
    import torch
    from safetensors.torch import load_file

    tensors = load_file(str(tiny / "model.safetensors"))
    generator = torch.Generator().manual_seed(5)
    for name in sorted(tensors):
        saved = tensors[name].double()
        z = torch.randn(saved.shape, generator=generator, dtype=torch.float64)
        if name.endswith("norm.weight"):
            expected = 1.0 + 0.1 * z
        elif name.endswith("embed_tokens.weight"):
            expected = 0.6 * z
        else:
            scale = 4.0 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
            expected = scale / saved.shape[-1] ** 0.5 * z
        torch.testing.assert_close(saved, expected, rtol=1e-6, atol=1e-7, msg=name)


# --- The review's mutants -------------------------------------------------------------------------
#
# 109 hand mutants, each applied alone to a copy of src/presto and run against the tests that use the
# module (test_predictor_provenance for V; test_model_assets and test_model_assets_review3, not slow,
# for M). "existing" names the first existing test that failed; "new" a test of this file.
#
# predictor/provenance.py (52: 12 existing, 34 new, 6 equivalent)
#   V14 tau = alpha, V15 decisive keys inverted, V30 `<=`, V33 max, V33b first setting, V35 values not
#   deduplicated, V38 the run's value from training, V41 trained tau null not read as 1/alpha: existing
#   (pooled-settings test). V23 numbers shown with str, V31 `!=`, V46 parts counted: existing
#   (unknown-setting test). V44 samplers not checked to be a list: existing (old-checkpoint test).
#   V1-V4, V43 (parse_provenance): new, trained-shape test. V8-V13, V22, V49 (tau_as_meant): new,
#   tau-null test. V27, V34, V39, V42, V47, V6b: new, nearest-setting test. V36: new, key-only-some test.
#   V21, V26b, V28, V29, V32: new, runs-sampler-counts test. V17-V20, V24: new, rounding test. V16a,
#   V40, V50: new, any-mapping test. V26: new, unknown-sampler test (pins the current choice: see below).
#   V6 (steps not read from SamplerSettings): equivalent: steps is never compared nor shown.
#   V7 (options override the shared keys): equivalent: validate_sampler keeps options disjoint from them.
#   V16b ("runs" decisive): equivalent: a run's sampler section has no "runs" key.
#   V16c ("name" decisive): equivalent: settings are selected by name, so it is always equal.
#   V25 (`provenance is None` for `not provenance`): equivalent: {} has no samplers and returns None.
#   V48 (name not str()): equivalent: names are strings; None formats as "None" either way.
#
# models/assets.py (57: 16 existing, 33 new, 8 equivalent)
#   M3 XDG relative, M6 RuntimeError not caught, M11/M12/M12b marker source checks, M17 folder name
#   without size, M21 no wheel-less fallback, M24 shared lock, M27 incomplete final not moved aside,
#   M29/M31 fsyncs, M41 no check under the lock, M43/M44 leftovers, M50 norms without 1 +, M55 seed
#   not in the tiny marker: existing (test_model_assets, test_model_assets_review3).
#   M1, M2, M2b: new, cache-root test. M13c, M13d, M13e: new, fingerprint test. M14, M15, M18, M19,
#   M19b, M20, M22b, M23: new, model-path test. M22: new, chat-template test. M7: new, embedded-location
#   test. M9: new, marker test. M40: new, read-only cache test. M26, M26b, M26c: new, modes test.
#   M28, M28b: new, publish-race test. M42: new, full-disk errno test. M44b: new, leftovers test.
#   M33, M37, M46: new, tokenizer test (M46 through the tiny fixture). M45, M45b: new, marker test.
#   M49, M51, M52: new, documented-draw test.
#   M6b (only RuntimeError caught): equivalent on Python 3.11, whose Path.home() raises RuntimeError
#       (KeyError is for other versions' pwd lookup).
#   M10 (`info.get("source_size")` for `"source_size" in info`): equivalent: a GGUF is never 0 bytes.
#   M13 (tail seek without max()): differs only for files between 1 and 2 MiB, no real model; either
#       reading of "first and last MiB" is a fingerprint.
#   M13b (`>=` span): equivalent: at exactly 1 MiB the tail read is empty.
#   M30 (fsyncs not sorted files first): equivalent: all of them end before the rename.
#   M47 (an old tiny folder not moved aside first): equivalent: _publish moves an incomplete one aside.
#   M53 (tie_weights dropped): equivalent: the config ties them, and save_pretrained writes one tensor.
#   M54 (scales not in the tiny marker): equivalent within a version (constants; a cache key only).
