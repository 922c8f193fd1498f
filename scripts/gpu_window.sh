#!/usr/bin/env bash
# One GPU window of the generated-family experiment, run detached so it outlives each device command:
#   bash scripts/gpu_window.sh start        launch `python -m leap_jax.experiment` (EXP_ARGS) in its own
#                                           process session; its log is $EXP_OUT/window.log
#   bash scripts/gpu_window.sh wait SECS    wait until it ends or SECS pass, print progress, and pack into
#                                           $OUT what came so far: the shared policy as <=15 MiB tar parts
#                                           (once, when it was made in this window) and every run's metrics,
#                                           final evaluations, logs and report (window_runs.tgz)
# A window is several device commands back to back (each at most 10 minutes; the machine keeps what the
# last one left while it is held): `start; wait 560`, then `wait 580` until it prints "window: done".
# `wait` re-packs every 60 s, so a command stopped at its time limit still returns the last minute's
# runs; still give each `wait` a SECS at least 60 s below the device time the lease has left (the
# lease's held time also counts the seconds between commands).
# A policy made in an earlier window starts every arm instead of a new SFT run: POLICY_TGZ names its
# tar.gz (e.g. artifacts/policies/gen-2026-12-04/policy.tar.gz, which the repository carries).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu_out}"; mkdir -p "$OUT"
EXP_OUT=${EXP_OUT:-runs/gen}
EXCLUDES="$PWD/scripts/runs_tar_excludes.txt"  # what stays on the machine (checkpoints, the policy...)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$EXP_OUT"
case ${1:-} in
  start)
    if [ -n "${POLICY_TGZ:-}" ] && [ ! -f "$EXP_OUT/policy/config.json" ]; then
      tar xzf "$POLICY_TGZ" -C "$EXP_OUT" || { echo "window: cannot unpack POLICY_TGZ=$POLICY_TGZ"; exit 2; }
    fi
    [ -f "$EXP_OUT/policy/config.json" ] && touch "$EXP_OUT/.policy_carried"
    base="--out $EXP_OUT --config-dir configs/generated --sft-config configs/generated/bootstrap_sft.yaml --metric heldout/acc@1"
    echo "window: start $(date -u +%FT%TZ): python3 -m leap_jax.experiment $base ${EXP_ARGS:-}" | tee -a "$EXP_OUT/window.log"
    # shellcheck disable=SC2086
    setsid nohup python3 -m leap_jax.experiment $base ${EXP_ARGS:-} >> "$EXP_OUT/window.log" 2>&1 < /dev/null &
    echo $! > "$EXP_OUT/window.pid" ;;
  wait)
    limit=${2:-560}; t0=$(date +%s); packed=$t0
    pid=$(cat "$EXP_OUT/window.pid" 2>/dev/null || echo 0)
    pack() {  # what came so far into $OUT: a command killed at its limit still returns the last pack
      if [ -f "$EXP_OUT/policy/config.json" ] && [ ! -f "$EXP_OUT/.policy_carried" ] && [ ! -f "$EXP_OUT/.policy_sent" ]; then
        tar cf - -C "$EXP_OUT" policy | split -b 15M - "$OUT/policy.tar.part-" && touch "$EXP_OUT/.policy_sent"
      fi
      (cd "$EXP_OUT" && tar czf "$OUT/.window_runs.tgz" --exclude-from="$EXCLUDES" . \
         && mv "$OUT/.window_runs.tgz" "$OUT/window_runs.tgz")
    }
    while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do
      sleep 5
      if [ $(( $(date +%s) - packed )) -ge 60 ]; then pack; packed=$(date +%s); echo "window: packed at $(( packed - t0 ))s"; fi
    done
    if kill -0 "$pid" 2>/dev/null; then echo "window: running after ${limit}s"; else echo "window: done"; fi
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
    python3 - "$EXP_OUT" <<'PY'
import json, sys
from pathlib import Path
for d in sorted(Path(sys.argv[1]).glob("*-s*")):
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()] if (d / "metrics.jsonl").is_file() else []
    ev = [(r["step"], round(r["heldout/acc@1"], 3)) for r in rows if r.get("heldout/acc@1") is not None]
    last = rows[-1] if rows else {}
    print(f"{d.name}: step {last.get('step')} train_s {last.get('time/train_total', 0):.0f} held-out {ev[-4:]}"
          f" finished={(d / 'finished.json').is_file()} final={(d / 'final_eval.json').is_file()}")
PY
    tail -n 15 "$EXP_OUT/window.log"
    pack ;;
  *) echo "usage: bash scripts/gpu_window.sh start | wait SECONDS"; exit 2 ;;
esac
