#!/usr/bin/env bash
# The GPU tests: every test marked `gpu` or `parity` (the CPU suite skips them without a GPU).
#   bash scripts/gpu/tests.sh [all|env|trainer] [PYTEST_ARGS...]
#     all (default)  tests/        ~9 min on an H200: split into env + trainer under a 10-minute limit
#     env            tests/kernels_env: the CuPy backend, pool, pipeline, hostile corpus, timing cheats
#     trainer        tests/leap_jax: bf16 sampler variants, cuDNN attention, parity with transformers
# Logs: $OUT/gpu-tests-<part>.log. Limit TESTS_S (default 580) seconds.
source "$(dirname "$0")/common.sh"
part=${1:-all}; shift || true
case $part in
  all) dirs=tests ;; env) dirs=tests/kernels_env ;; trainer) dirs=tests/leap_jax ;;
  *) echo "usage: bash scripts/gpu/tests.sh [all|env|trainer] [PYTEST_ARGS...] (got '$part')"; exit 2 ;;
esac
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
run_logged "gpu-tests-$part" "${TESTS_S:-580}" $PY -m pytest -q -rfE --durations=12 --timeout=200 \
  -p no:cacheprovider -m "gpu or parity" $dirs "$@"
