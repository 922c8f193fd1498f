#!/usr/bin/env bash
# The environment's throughput: timed suite evaluations/s, an RL-like mix with failing submissions,
# the generated family correctness-only, each evaluation checked against an independent CUDA-event
# clock (benchmarks/env_throughput.py; benchmarks/README.md explains the table).
#   bash scripts/gpu/env_bench.sh [ENV_THROUGHPUT_ARGS...]
#     default args: --workloads suite,mix --repeat 2 --arm-timeout 150 --independent-hold
#   BEFORE_SRC=DIR   compare with an older kernels_env, side by side in one table
#                    (make DIR with `mkdir DIR && git archive COMMIT kernels_env | tar -x -C DIR`)
# Log: $OUT/env-bench.log. Limit ENVBENCH_S (420) seconds.
source "$(dirname "$0")/common.sh"
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--workloads suite,mix --repeat 2 --arm-timeout 150 --independent-hold)
[ -n "${BEFORE_SRC:-}" ] && args=(--before-src "$BEFORE_SRC" "${args[@]}")
run_logged env-bench "${ENVBENCH_S:-420}" $PY benchmarks/env_throughput.py "${args[@]}"
