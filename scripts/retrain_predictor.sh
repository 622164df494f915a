#!/usr/bin/env bash
# Retrain the epsilon-certainty predictor from the trees of PreSTO runs and install it where
# running jobs hot-load it (traversal=predictive traversal.predictor=PATH):
#
#   bash scripts/retrain_predictor.sh RUN_DIR [RUN_DIR ...] --out PATH [--force] [--workdir DIR] [key=value ...]
#
# RUN_DIRs are searched for trees.jsonl (finished or still running runs; a torn last line
# is skipped). key=value pairs go to src/train_predictor.py (e.g. predictor=mlp32,
# 'features=[cut,likelihood]', folds=5). The new checkpoint replaces PATH atomically, and
# only if its cross-validated log loss beats the class-frequency baseline (--force: always).
# Metrics land in the work directory and next to PATH as PATH.metrics.json.
set -euo pipefail

usage() {
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
}

runs=()
overrides=()
out=""
workdir=""
require="true"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out="${2:?--out needs a path}"; shift 2 ;;
        --out=*) out="${1#--out=}"; shift ;;
        --workdir) workdir="${2:?--workdir needs a path}"; shift 2 ;;
        --workdir=*) workdir="${1#--workdir=}"; shift ;;
        --force) require="false"; shift ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "error: unknown option $1" >&2; usage >&2; exit 2 ;;
        *=*) overrides+=("$1"); shift ;;
        *) runs+=("$1"); shift ;;
    esac
done
if [[ ${#runs[@]} -eq 0 || -z "$out" ]]; then
    echo "error: give at least one RUN_DIR and --out PATH" >&2
    usage >&2
    exit 2
fi

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=${PYTHON:-python3}
abspath() { "$PY" -c 'import os, sys; print(os.path.abspath(sys.argv[1]))' "$1"; }

list=""
for run in "${runs[@]}"; do
    [[ -e "$run" ]] || { echo "error: no such run directory: $run" >&2; exit 2; }
    list+="\"$(abspath "$run")\","
done
out="$(abspath "$out")"
workdir="$(abspath "${workdir:-$ROOT/outputs/predictor/retrain-$(date +%Y-%m-%d_%H-%M-%S)-$$}")"

status=0
"$PY" "$ROOT/src/train_predictor.py" \
    "runs=[${list%,}]" \
    "output=\"$out\"" \
    "require_improvement=$require" \
    "hydra.run.dir=\"$workdir\"" \
    "${overrides[@]}" || status=$?

if [[ -f "$workdir/metrics.json" ]]; then
    cp "$workdir/metrics.json" "$out.metrics.json.tmp" && mv -f "$out.metrics.json.tmp" "$out.metrics.json"
fi
if [[ $status -eq 3 ]]; then
    echo "kept the previous checkpoint at $out: the new model is no better than the class frequencies (--force to install anyway)" >&2
elif [[ $status -eq 0 ]]; then
    echo "installed $out (metrics: $out.metrics.json, work directory: $workdir)"
fi
exit $status
