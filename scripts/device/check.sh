#!/usr/bin/env bash
# The transformers-engine GPU check, run ON THE LENT DEVICE MACHINE from the kit that
# scripts/device/pack.py built (see scripts/device/README.md for the two tool calls).
# Nothing is installed system-wide and nothing is downloaded: the kit's wheels go to $SITE,
# the repo's src/ goes on PYTHONPATH, the embedded GGUF is rejoined from its two parts.
#
#   bash scripts/device/check.sh                     # call 1 and call 2 alike; each carries one model part
#   DEVICE=cpu KIT=/tmp/devkit311 bash scripts/device/check.sh dataset.num_prompts=1 sampler.steps=4
#                 # a rehearsal without a GPU, with a kit built for this machine's Python (README: rehearsal)
#
# Every call first keeps the part it carried in $STASH (outside the repo), installs the wheels
# and runs a preflight (versions, GPU, Hydra, HumanEval rows through datasets). Only when both
# parts are there (the second call, on a machine still warm from the first) does it go on:
#   1. benchmark, engine.dtype=float64 (exact on any batch): every sampler, sequential vs each traversal
#   2. the hf engine tests (tests/test_hf_engine.py with its gpu test, the hf stop-at-EOS tests)
#   3. scripts/call_cost.py: a call's time against its rows
#   4. benchmark in float32 (the default dtype; not batch-invariant) with whatever time is left
# Arguments are Hydra overrides for the benchmarks (call_cost gets the engine.*, model.* and
# dataset.* ones). Exit status: 0 every step ran and passed, 1 a step failed or was skipped for
# lack of time, 2 the kit is broken, 3 a model part is missing (make the other call now).
#
# Environment:
#   DEVICE      cuda (default) or cpu (rehearsal: no nvidia-smi, engine.device=cpu)
#   OUT         where the report and JSON go (default $OUT, else outputs/device_check/<time>)
#   BUDGET_S    seconds this script may take in all (default 540); each step gets a share
#   DTYPES      benchmark dtypes in order (default "float64 float32"; the first is the one that counts)
#   SAMPLERS    (default "multitry powermh entropycut": MultiTryMH first,
#               its speed target is the one a GPU must judge); TRAVERSALS (default "bfs predictive clairvoyant")
#   N_PF        PreSTO budgets (default "20")
#   TESTS       pytest arguments (default: the hf engine tests); SKIP_TESTS=1 skips them
#   CALL_COST_ARGS  extra call_cost.py options (default none: rows 1..140, 64 tokens)
#   RESERVE_S TESTS_S CALL_COST_S  seconds kept for steps 2-3 during step 1 (100, at most a third of
#               what is left), their timeouts (90, 60)
#   KIT STASH SITE  the kit in the repo (.devkit), where parts are kept (/tmp/presto-devkit),
#                   the --target of the wheels (/tmp/site)
set -uo pipefail

cd "$(dirname "$0")/../.."
REPO=$(pwd)
DEVICE=${DEVICE:-cuda}
KIT=${KIT:-$REPO/.devkit}
STASH=${STASH:-/tmp/presto-devkit}
SITE=${SITE:-/tmp/site}
BUDGET_S=${BUDGET_S:-540}
DEADLINE=$((SECONDS + BUDGET_S))
out="${OUT:-$REPO/outputs/device_check/$(date +%Y-%m-%d_%H-%M-%S)}"
mkdir -p "$out"
report="$out/device_check.txt"
: >"$report"
status=0
timings=()

say() { echo -e "$*" | tee -a "$report"; }
# Lines of noise in the report: progress bars, vLLM/transformers chatter.
quiet() { grep --line-buffered -v -E "^(\(|INFO |DEBUG |WARNING [0-9])|it/s\]|s/it\]|^\s*$"; }

# step NAME SECONDS COMMAND...: run under `timeout` (SIGINT first: the benchmark then keeps its
# finished samplers), capped by what is left of BUDGET_S; its time and status go to the summary.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - SECONDS))
    ((limit > left)) && limit=$left
    if ((limit < 20)); then
        say "\n## ${name}: skipped, ${left}s of BUDGET_S left"
        timings+=("${name}: SKIPPED (no time left)")
        status=1 # a step that did not run did not pass: exit 0 means every step ran and passed
        return 0
    fi
    say "\n## ${name} (timeout ${limit}s)"
    local start=$SECONDS
    timeout -s INT -k 20 "$limit" "$@" 2>&1 | quiet | tee -a "$report"
    local rc=${PIPESTATUS[0]}
    local took=$((SECONDS - start))
    local note="rc ${rc}"
    [[ $rc -eq 124 || $rc -eq 130 || $rc -eq 137 ]] && note="TIMED OUT at ${limit}s (rc ${rc})"
    timings+=("${name}: ${took}s, ${note}")
    say "-- ${name}: ${took}s, ${note}"
    [[ $rc -eq 0 ]] || status=1
    return "$rc"
}

summary() {
    say "\n## summary (${SECONDS}s in all, BUDGET_S=${BUDGET_S}, DEVICE=${DEVICE})"
    for line in "${timings[@]}"; do say "  $line"; done
    # The figures of every benchmark JSON, also of one cut short (it keeps each finished sampler).
    for json in "$out"/benchmark_*.json; do
        [[ -f "$json" ]] || continue
        python3 - "$json" <<'EOF' 2>&1 | tee -a "$report"
import json, sys
data = json.load(open(sys.argv[1]))
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: complete={data['complete']}")
print("  sampler    traversal   n_pf calls  call_s  s/call speedup calls÷ s/call× identical same_log_A")
# partial_rows: the sampler under way when the benchmark was cut short, over its finished chains
for r in data["rows"] + [dict(p, traversal=p["traversal"] + "*") for p in data.get("partial_rows", [])]:
    print(f"  {r['sampler']:<10} {r['traversal']:<11} {r['n_pf']:>4} {r['model_calls']:>5} {r['call_time_s']:>7.2f} "
          f"{r['time_per_call_s']:>7.3f} {r['speedup']:>6.2f}x {r['call_reduction']:>5.2f} "
          f"{r['time_per_call_ratio']:>6.2f} {r['identical_chains']:>9.2f} {r.get('same_path_chains', float('nan')):>10.2f}")
EOF
    done
    say "files: $(cd "$out" && ls | tr '\n' ' ')"
}

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export HF_HOME="$STASH/hf" PRESTO_CACHE_DIR="$STASH/cache" MPLBACKEND=Agg TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1

say "# presto device check (transformers engine), $(date -u +%Y-%m-%dT%H:%M:%SZ), DEVICE=${DEVICE}"
if [[ "$DEVICE" == cuda ]]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$report"
fi

# --- the kit: keep this call's part, install the wheels ------------------------------------
if [[ ! -f "$KIT/manifest.json" ]]; then
    say "error: $KIT/manifest.json is not here: carry .devkit/manifest.json (python3 scripts/device/pack.py build)"
    exit 2
fi
start=$SECONDS
python3 scripts/device/pack.py stash --kit "$KIT" --stash "$STASH" 2>&1 | tee -a "$report"
[[ ${PIPESTATUS[0]} -eq 0 ]] || exit 2
stamp="$SITE/.presto-wheels.sha256"
want=$(cat "$KIT"/wheels/*.whl | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$KIT"/wheels/*.whl 2>&1 | grep -v -i "warning: target directory" | tee -a "$report"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || {
        say "error: the wheels did not install"
        exit 2
    }
    echo "$want" >"$stamp"
    say "wheels: $(ls "$KIT"/wheels | tr '\n' ' ')-> $SITE"
else
    say "wheels: already in $SITE"
fi
export PYTHONPATH="$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
timings+=("kit (stash, wheels): $((SECONDS - start))s")

# --- preflight: every import, the config, the GPU, HumanEval's rows -------------------------
start=$SECONDS
say "\n## preflight"
DEVICE=$DEVICE python3 - <<'EOF' 2>&1 | quiet | tee -a "$report"
import importlib, importlib.metadata, os, platform, sys, time
sys.path.insert(0, "scripts")
print("python", platform.python_version(), sys.executable)
for name in ("torch transformers tokenizers huggingface_hub numpy scipy lightning sklearn pandas pyarrow fsspec "
             "hydra omegaconf antlr4 gguf datasets dill multiprocess").split():
    module = importlib.import_module(name)
    dist = {"sklearn": "scikit-learn", "antlr4": "antlr4-python3-runtime", "hydra": "hydra-core"}.get(name, name)
    print(f"  {dist} {importlib.metadata.version(dist)}  ({os.path.dirname(module.__file__)})")
import torch
device = os.environ["DEVICE"]
if device == "cuda":
    assert torch.cuda.is_available(), "torch sees no CUDA GPU"
    props = torch.cuda.get_device_properties(0)
    a = torch.randn(2048, 2048, dtype=torch.float64, device="cuda")
    torch.cuda.synchronize(); t = time.perf_counter(); (a @ a).sum().item(); torch.cuda.synchronize()
    print(f"  cuda {torch.version.cuda}: {props.name}, {props.total_memory / 2**30:.0f} GiB; "
          f"float64 2048^3 matmul {1e3 * (time.perf_counter() - t):.1f} ms (first call)")
    print(f"  tf32 matmul allowed: {torch.backends.cuda.matmul.allow_tf32}")
from benchmark import load_config
from presto.config import validate
from presto.tasks import build_task
from omegaconf import OmegaConf
_, cfg = load_config(["engine=hf"])
settings = validate(cfg)
task = build_task(OmegaConf.to_container(cfg.dataset, resolve=True))
problems = task.load()
print(f"  config composes; humaneval: {len(problems)} problems, first {problems[0].problem_id}")
first = problems[0].reference
try:
    grade = task.grade(problems[0], f"```python\n{first['prompt']}{first['canonical_solution']}\n```")
    print(f"  grading sandbox, canonical solution of {problems[0].problem_id}: correct={grade.correct} {grade.detail}")
except RuntimeError as err:  # the sandbox could not run here: the GPU checks still can
    print(f"  grading sandbox could not run: {type(err).__name__}: {err}")
EOF
rc=${PIPESTATUS[0]}
timings+=("preflight: $((SECONDS - start))s, rc ${rc}")
if [[ $rc -ne 0 ]]; then
    say "error: the preflight failed (see above); nothing else runs"
    summary
    exit 2
fi

# --- the model: both parts, or stop here --------------------------------------------------
python3 scripts/device/pack.py assemble --kit "$KIT" --stash "$STASH" --site "$SITE" 2>&1 | tee -a "$report"
rc=${PIPESTATUS[0]}
if [[ $rc -eq 3 ]]; then
    say "\nREADY: this call's part is kept in $STASH; make the call that carries the other part NOW (the machine goes back after 30 s idle)"
    summary
    exit 3
elif [[ $rc -ne 0 ]]; then
    say "error: the model could not be assembled"
    exit 2
fi

start=$SECONDS
say "\n## model conversion (GGUF -> float32 HF folder, once per machine)"
python3 -c "from presto.models.assets import resolve_model_dir as r; print(r('smollm2-135m-instruct'))" 2>&1 |
    tee -a "$report"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
timings+=("model conversion: $((SECONDS - start))s")

# --- 1. the benchmark in the exact dtype first; 2. tests; 3. call cost; 4. another dtype ----
read -r -a budgets <<<"${N_PF:-20}"
read -r -a samplers <<<"${SAMPLERS:-multitry powermh entropycut}"
read -r -a traversals <<<"${TRAVERSALS:-bfs predictive clairvoyant}"
read -r -a dtypes <<<"${DTYPES:-float64 float32}"
engine=(engine=hf "engine.device=${DEVICE}")
bench=(python3 scripts/benchmark.py --n-pf "${budgets[@]}" --samplers "${samplers[@]}" --traversals "${traversals[@]}"
    "${engine[@]}" run.progress=false)
RESERVE_S=${RESERVE_S:-100} # kept for the tests and call_cost while the first benchmark runs
# At most a third of what is left: with a small BUDGET_S a fixed reserve would leave the
# benchmark, the figure that counts, no time at all while the tests and call_cost run.
reserve=$(((DEADLINE - SECONDS) / 3))
((reserve > RESERVE_S)) && reserve=$RESERVE_S
step "benchmark dtype=${dtypes[0]}" $((DEADLINE - SECONDS - reserve)) "${bench[@]}" \
    --out "$out/benchmark_${dtypes[0]}.json" "engine.dtype=${dtypes[0]}" "$@"

if [[ "${SKIP_TESTS:-0}" != "1" ]]; then
    read -r -a tests <<<"${TESTS:-tests/test_hf_engine.py tests/test_engine_stop_at_eos.py -k hf}"
    step "tests: ${tests[*]}" "${TESTS_S:-90}" python3 -m pytest "${tests[@]}" -q -rA -p no:cacheprovider
fi

read -r -a cost_args <<<"${CALL_COST_ARGS:-}"
# call_cost composes the default sampler and traversal: only the overrides it shares with every
# setting (the engine, the model, the dataset) go to it; sampler.beta=2 would make it refuse.
shared=()
for override in "$@"; do
    [[ $override =~ ^\+{0,2}(engine|model|dataset)[.=/] ]] && shared+=("$override")
done
step "call cost vs rows (dtype=${dtypes[0]})" "${CALL_COST_S:-60}" python3 scripts/call_cost.py "${cost_args[@]}" "${engine[@]}" \
    "engine.dtype=${dtypes[0]}" "${shared[@]}"

for dtype in "${dtypes[@]:1}"; do
    step "benchmark dtype=${dtype}" $((DEADLINE - SECONDS - 5)) "${bench[@]}" --out "$out/benchmark_${dtype}.json" \
        "engine.dtype=${dtype}" "$@"
done

summary
exit "$status"
