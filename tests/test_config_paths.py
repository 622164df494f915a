"""File-valued config keys are stored absolute (presto.config.absolute_path / make_paths_absolute).

config.yaml must name the files a run used, whatever directory a later resume starts in; names
that are not paths (the embedded model, traversal.predictor=default, null) are kept as given.
"""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from presto.config import absolute_path, make_paths_absolute
from presto.models.assets import DEFAULT_MODEL


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("key", ["engine.table", "dataset.path", "traversal.predictor", "model.cache_dir"])
def test_a_relative_path_is_made_absolute_against_the_working_directory(in_tmp, key):
    assert absolute_path(key, "sub/file.json") == str(in_tmp / "sub" / "file.json")
    assert absolute_path(key, "../up.json") == str(in_tmp.parent / "up.json")


def test_a_home_relative_path_is_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert absolute_path("dataset.path", "~/rows.jsonl") == str(tmp_path / "rows.jsonl")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("traversal.predictor", "default"),
        ("traversal.predictor", "None"),
        ("traversal.predictor", None),
        ("dataset.path", None),
        ("dataset.path", ""),
        ("model.path", "none"),
        ("model.path", "org/not-here"),  # a hub id: refused later in its own words, as typed
        ("sampler.name", "powermh"),  # not a path key
        ("budget.n_pf", 20),
    ],
)
def test_names_that_are_not_paths_are_kept(in_tmp, key, value):
    assert absolute_path(key, value) == value


def test_the_embedded_models_name_is_kept_even_where_a_folder_has_that_name(in_tmp):
    (in_tmp / DEFAULT_MODEL).mkdir()
    assert absolute_path("model.path", DEFAULT_MODEL) == DEFAULT_MODEL


def test_a_model_folder_that_exists_is_made_absolute_without_resolving_symlinks(in_tmp):
    (in_tmp / "real").mkdir()
    os.symlink(in_tmp / "real", in_tmp / "link")
    assert absolute_path("model.path", "link") == str(in_tmp / "link")


def test_make_paths_absolute_rewrites_the_config_in_place(in_tmp):
    cfg = OmegaConf.create(
        {
            "engine": {"name": "toy", "table": "t.json"},
            "model": {"path": "none", "cache_dir": None},
            "dataset": {"path": "d.jsonl"},
            "traversal": {"name": "predictive", "predictor": "default"},
        }
    )
    OmegaConf.set_struct(cfg, True)  # as Hydra hands it over
    make_paths_absolute(cfg)
    assert cfg.engine.table == str(in_tmp / "t.json")
    assert cfg.dataset.path == str(in_tmp / "d.jsonl")
    assert (cfg.model.path, cfg.model.cache_dir, cfg.traversal.predictor) == ("none", None, "default")
