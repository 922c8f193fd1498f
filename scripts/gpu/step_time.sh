#!/usr/bin/env bash
# Seconds per RL step, phase by phase (benchmarks/step_time.py), with the shipped SFT policy and real
# CuPy evaluation, each arm in its own trainer after one warm-up step (compilation left out).
#   bash scripts/gpu/step_time.sh [CONFIG] [STEP_TIME_ARGS...]
#     CONFIG default configs/generated/multiturn.yaml; default args --arms after --steps 2 --warmup 1
#     e.g. bash scripts/gpu/step_time.sh configs/generated/grpo.yaml --arms after --arm 'mesh1: mesh.force=true'
#   BEFORE_SRC=DIR   run the same command on an older tree first (a full copy of it, e.g.
#                    `mkdir DIR && git archive COMMIT | tar -x -C DIR`), for a before/after on one machine
# Logs: $OUT/step-time[-before].log. Limit STEP_S (540) seconds per tree.
source "$(dirname "$0")/common.sh"
config=${1:-configs/generated/multiturn.yaml}; shift || true
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--arms after --steps 2 --warmup 1)
$PY -m leap_jax.bootstrap.shipped_policy || exit 1  # configs/generated start from runs/gen/policy
rc=0
if [ -n "${BEFORE_SRC:-}" ]; then
  mkdir -p "$BEFORE_SRC/runs/gen" && ln -sfn "$PWD/runs/gen/policy" "$BEFORE_SRC/runs/gen/policy"
  out_abs=$(cd "$OUT" && pwd)
  (cd "$BEFORE_SRC" && PYTHONPATH="$PWD" OUT="$out_abs" run_logged step-time-before "${STEP_S:-540}" \
     $PY benchmarks/step_time.py --config "$config" "${args[@]}") || rc=$?
fi
run_logged step-time "${STEP_S:-540}" $PY benchmarks/step_time.py --config "$config" "${args[@]}" || rc=$?
exit $rc
