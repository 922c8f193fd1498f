#!/usr/bin/env bash
# Put what `bash scripts/gpu_session.sh experiment` (or `gen`) brought back from the GPU machine into
# its experiment folder: the shared bf16 policy (policy.tar.part-*) and the runs' metrics and report
# (experiment_runs.tgz, or gen_runs.tgz, lag_runs.tgz). A later GPU call then carries that folder
# (`carry: ["runs/experiment"]`), so its arms start from the same policy and finished runs are skipped.
#   bash scripts/unpack_experiment.sh FILES_AT [DEST]     DEST: runs/experiment (default), runs/gen or runs/lag
set -euo pipefail
src=${1:?usage: bash scripts/unpack_experiment.sh FOLDER_WITH_THE_RETURNED_FILES [DEST]}
dest=${2:-runs/experiment}
cd "$(dirname "$0")/.."
mkdir -p "$dest"
if ls "$src"/policy.tar.part-* >/dev/null 2>&1; then
  rm -rf "$dest/policy"
  cat "$src"/policy.tar.part-* | tar xf - -C "$dest"
fi
for tgz in "$src"/experiment_runs.tgz "$src"/gen_runs.tgz "$src"/lag_runs.tgz; do
  if [ -f "$tgz" ]; then tar xzf "$tgz" -C "$dest"; fi
done
ls "$dest"
