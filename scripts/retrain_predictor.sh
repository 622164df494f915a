#!/usr/bin/env bash
# Retrain the epsilon-certainty predictor from the trees of PreSTO runs and install it where
# running jobs hot-load it (traversal=predictive traversal.predictor=PATH):
#
#   bash scripts/retrain_predictor.sh RUN_DIR [RUN_DIR ...] --out PATH [--force] [--workdir DIR] [key=value ...]
#
# RUN_DIRs are searched for trees.jsonl (finished or still running runs; a torn last line
# is skipped); an existing directory is a RUN_DIR even when its name holds '=' (sweep/budget.n_pf=8).
# Other key=value pairs go to src/train_predictor.py (e.g. predictor=mlp32,
# 'features=[cut,likelihood]', folds=5).
#
# Improvement gate: the new checkpoint replaces PATH atomically, and only if its
# cross-validated log loss beats the class-frequency baseline; otherwise PATH (or its
# absence) is left as it was and the script exits with status 3. In a training fold that
# lacks a class (one logged in few prompts), that baseline gives the class its add-one
# smoothed share, never a 1e-15 floor, so no model passes the gate by that floor alone.
#   --out PATH      where running jobs load the predictor (required)
#   --force         install the new checkpoint even when it does not pass the gate
#                   (never a diverged one, with non-finite weights: the job fails)
#   --workdir DIR   the job's work directory (default outputs/predictor/retrain-<time>-<pid>)
# The checkpoint's metrics are installed with it as PATH.metrics.json (so that file always describes PATH);
# every job's metrics, installed or not, are in its work directory.
# Exit status: 0 installed, 2 usage error, 3 rejected by the gate, other: the job failed
# (1: the fit diverged, nothing installed; its metrics are in the work directory).
set -euo pipefail

usage() {
    # The comment block at the top of this file, without its '# '.
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}
die() {
    echo "error: $1 (bash scripts/retrain_predictor.sh --help for usage)" >&2
    exit 2
}
# The value of an option given as two words: a missing one or another option is a mistake
# (`--out --force` must not install the checkpoint at a file named --force).
value_of() {
    [[ $# -ge 2 && -n "$2" && "$2" != -* ]] || die "$1 needs a value"
    printf '%s' "$2"
}

runs=()
overrides=()
out=""
workdir=""
require="true"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out="$(value_of "$@")" || exit 2; shift 2 ;;
        --out=*) out="${1#--out=}"; [[ -n "$out" ]] || die "--out needs a value"; shift ;;
        --workdir) workdir="$(value_of "$@")" || exit 2; shift 2 ;;
        --workdir=*) workdir="${1#--workdir=}"; [[ -n "$workdir" ]] || die "--workdir needs a value"; shift ;;
        --force) require="false"; shift ;;
        -h | --help) usage; exit 0 ;;
        -*) die "unknown option $1" ;;
        *)
            # An existing directory (or trees file) is a run even when its name holds '='
            # (Hydra sweep jobs live in sweep/budget.n_pf=8/).
            if [[ -e "$1" ]]; then
                runs+=("$1")
            elif [[ "$1" == *=* ]]; then
                overrides+=("$1")
            else
                die "no such run directory: $1"
            fi
            shift
            ;;
    esac
done
[[ ${#runs[@]} -gt 0 ]] || die "give at least one RUN_DIR"
[[ -n "$out" ]] || die "give --out PATH (where running jobs load the predictor)"

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY=${PYTHON:-python3}
abspath() { "$PY" -c 'import os, sys; print(os.path.abspath(sys.argv[1]))' "$1"; }

list=""
for run in "${runs[@]}"; do
    list+="\"$(abspath "$run")\","
done
out="$(abspath "$out")"
workdir="$(abspath "${workdir:-$ROOT/outputs/predictor/retrain-$(date +%Y-%m-%d_%H-%M-%S)-$$}")"
[[ ! -e "$workdir" || -d "$workdir" ]] || die "--workdir $workdir is a file; give a directory"

# train_predictor.py installs PATH and PATH.metrics.json together, and only on success:
# nothing is copied here, so a rejected model or a failed job (even in a reused work
# directory holding an earlier job's metrics.json) never touches PATH.metrics.json.
had_checkpoint=false
[[ -e "$out" ]] && had_checkpoint=true
status=0
"$PY" "$ROOT/src/train_predictor.py" \
    "runs=[${list%,}]" \
    "output=\"$out\"" \
    "require_improvement=$require" \
    "hydra.run.dir=\"$workdir\"" \
    ${overrides[@]+"${overrides[@]}"} || status=$?

if [[ $status -eq 3 ]]; then
    if $had_checkpoint; then
        kept="kept the previous checkpoint at $out"
    else
        kept="no checkpoint was installed at $out (there was none before)"
    fi
    echo "$kept: the new model is no better than the class frequencies" \
        "(metrics: $workdir/metrics.json; --force to install anyway)" >&2
elif [[ $status -eq 0 ]]; then
    echo "installed $out (metrics: $out.metrics.json, work directory: $workdir)"
fi
exit $status
