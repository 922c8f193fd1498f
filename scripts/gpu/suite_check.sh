#!/usr/bin/env bash
# Every hand-written task's known-good solution scored on the GPU: all must come back `correct`.
#   bash scripts/gpu/suite_check.sh [CHECK_SUITE_ARGS...]     e.g. --level 1, --tasks relu softmax
# Log: $OUT/suite-check.log (one row per task: status, speedup, seconds). Limit SUITE_S (300) seconds.
source "$(dirname "$0")/common.sh"
run_logged suite-check "${SUITE_S:-300}" $PY -m kernels_env check-suite --backend cupy "$@"
