#!/usr/bin/env bash
# Put what `bash scripts/gpu_session.sh experiment` brought back from the GPU machine into
# runs/experiment: the shared bf16 policy (policy.tar.part-*) and the runs' metrics and report
# (experiment_runs.tgz). A later GPU call then carries runs/experiment (`carry: ["runs/experiment"]`),
# so its arms start from the same policy and finished runs are skipped.
#   bash scripts/unpack_experiment.sh FILES_AT
set -euo pipefail
src=${1:?usage: bash scripts/unpack_experiment.sh FOLDER_WITH_THE_RETURNED_FILES}
cd "$(dirname "$0")/.."
mkdir -p runs/experiment
if ls "$src"/policy.tar.part-* >/dev/null 2>&1; then
  rm -rf runs/experiment/policy
  cat "$src"/policy.tar.part-* | tar xf - -C runs/experiment
fi
if [ -f "$src/experiment_runs.tgz" ]; then
  tar xzf "$src/experiment_runs.tgz" -C runs/experiment
fi
ls runs/experiment
