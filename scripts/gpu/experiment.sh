#!/usr/bin/env bash
# A LEAP-vs-baselines experiment (python -m leap_jax.experiment) that outlives one shell command: it
# runs detached (setsid nohup), writes outside the repository, and is resumable.
#   bash scripts/gpu/experiment.sh start [EXPERIMENT_ARGS...]   launch; e.g. --arms leap,multiturn --seeds 0
#   bash scripts/gpu/experiment.sh status [SECS]                wait up to SECS (default 0) for it to end,
#                                                               then print each run's step, clock and accuracy
#   bash scripts/gpu/experiment.sh collect                      pack the runs' metrics, final evaluations,
#                                                               logs and report into $OUT/experiment_runs.tgz
#   bash scripts/gpu/experiment.sh unpack FILES_DIR             put a collected tarball back into $EXP_OUT
# EXP_OUT (default $HOME/leap-runs/gen) holds the runs; starting again skips finished runs and resumes
# stopped ones. Every arm starts from the shipped SFT policy (runs/gen/policy, unpacked on first use);
# the configs are configs/generated/<arm>.yaml. The log is $EXP_OUT/experiment.log.
source "$(dirname "$0")/common.sh"
EXP_OUT=${EXP_OUT:-$HOME/leap-runs/gen}; mkdir -p "$EXP_OUT"
EXCLUDES="$PWD/scripts/gpu/runs_tar_excludes.txt"  # checkpoints, TensorBoard, caches and the policy stay behind
cmd=${1:-}; shift || true
case $cmd in
  start)
    $PY -m leap_jax.bootstrap.shipped_policy || exit 1
    args=(--out "$EXP_OUT" --config-dir configs/generated --policy runs/gen/policy --metric heldout/acc@1 "$@")
    echo "start $(date -u +%FT%TZ): $PY -m leap_jax.experiment ${args[*]}" | tee -a "$EXP_OUT/experiment.log"
    setsid nohup $PY -m leap_jax.experiment "${args[@]}" >> "$EXP_OUT/experiment.log" 2>&1 < /dev/null &
    echo $! > "$EXP_OUT/experiment.pid"; echo "running as pid $!; log $EXP_OUT/experiment.log" ;;
  status)
    pid=$(cat "$EXP_OUT/experiment.pid" 2>/dev/null); t0=$(date +%s)
    alive() { [ -n "$pid" ] && [ "$pid" -gt 1 ] && kill -0 "$pid" 2>/dev/null; }
    while alive && [ $(( $(date +%s) - t0 )) -lt "${1:-0}" ]; do sleep 5; done
    if alive; then echo "experiment: running"; else echo "experiment: not running"; fi
    $PY - "$EXP_OUT" <<'PY'
import json, sys
from pathlib import Path
for d in sorted(Path(sys.argv[1]).glob("*-s*")):
    m = d / "metrics.jsonl"
    rows = [json.loads(x) for x in m.read_text().splitlines() if x.strip()] if m.is_file() else []
    ev = [(r["step"], round(r["heldout/acc@1"], 3)) for r in rows if r.get("heldout/acc@1") is not None]
    last = rows[-1] if rows else {}
    print(f"{d.name}: step {last.get('step')} train_s {last.get('time/train_total', 0):.0f} held-out {ev[-4:]}"
          f" finished={(d / 'finished.json').is_file()} final={(d / 'final_eval.json').is_file()}")
PY
    tail -n 15 "$EXP_OUT/experiment.log" ;;
  collect)
    out_abs=$(cd "$OUT" && pwd)
    (cd "$EXP_OUT" && tar czf "$out_abs/.experiment_runs.tgz" --exclude-from="$EXCLUDES" . ) \
      && mv "$OUT/.experiment_runs.tgz" "$OUT/experiment_runs.tgz" && ls -l "$OUT/experiment_runs.tgz" ;;
  unpack)
    src=${1:?usage: bash scripts/gpu/experiment.sh unpack FOLDER_WITH_experiment_runs.tgz}
    tar xzf "$src/experiment_runs.tgz" -C "$EXP_OUT" && ls "$EXP_OUT" ;;
  *) echo "usage: bash scripts/gpu/experiment.sh start [ARGS...] | status [SECS] | collect | unpack FILES_DIR"; exit 2 ;;
esac
