#!/usr/bin/env bash
# Scoring through Ray on one GPU host (docs/DISTRIBUTED_EVAL.md): the suite through the process pool
# and through a local Ray cluster must give the same statuses in the same order
# (scripts/ray_suite_check.py), then the throughput of ray against process mode in one table.
#   bash scripts/gpu/ray_check.sh [RAY_SUITE_CHECK_ARGS...]      e.g. --level 1
# Needs Ray (`pip install ".[dist]"`, or wheels in .whl/: scripts/ray_carry.sh). Logs: $OUT/ray-*.log.
source "$(dirname "$0")/common.sh"
export RAY_USAGE_STATS_ENABLED=0
run_logged ray-suite "${RAY_SUITE_S:-420}" $PY scripts/ray_suite_check.py --backend cupy "$@"; rc=$?
run_logged ray-envbench "${ENVBENCH_S:-300}" $PY benchmarks/env_throughput.py --pool ray --repeat 2 || rc=$?
exit $rc
