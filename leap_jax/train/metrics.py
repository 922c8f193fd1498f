"""Per-step metrics sinks (DESIGN 4.8): JSONL (the source of truth for reports), TensorBoard, tqdm.

Each step's metrics are a flat dict of numbers (keys like `acc@1`, `time/generate`). The JSONL file
is append-only; on resume, lines for steps beyond the restored step are dropped first, so a resumed
run's file equals an uninterrupted run's.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.json"
FINAL_EVAL_FILE = "final_eval.json"  # eval.final_turns: the finished policy with turns of real feedback
START_EVAL_FILE = "start_eval.json"  # the evaluation before the first update, reusable by eval.start_metrics


def _clean(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All per-step records of a run, in file order."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            rows.append(json.loads(line))
    return rows


def truncate_metrics(run_dir: str | Path, last_step: int) -> None:
    """Keep only records with step <= last_step (used before resuming)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return
    keep = [r for r in read_metrics(run_dir) if int(r.get("step", -1)) <= last_step]
    path.write_text("".join(json.dumps(r) + "\n" for r in keep))


def _summary_writer(log_dir: Path) -> Any:
    """A TensorBoard event writer: tensorboardX (the `train` extra), else the one torch ships; with
    neither, a warning and none (metrics.jsonl is the source of truth for reports)."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            warnings.warn("logging.tensorboard=true but neither tensorboardX nor torch.utils.tensorboard is "
                          "importable (pip install tensorboardX); writing metrics.jsonl only", stacklevel=3)
            return None
    return SummaryWriter(str(log_dir))


class MetricsWriter:
    """Write step records to JSONL and (optionally) TensorBoard; drive an optional tqdm bar."""

    def __init__(self, run_dir: str | Path, *, jsonl: bool = True, tensorboard: bool = True,
                 progress_bar: bool = True, total_steps: int = 0, initial_step: int = 0):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.run_dir / METRICS_FILE, "a") if jsonl else None
        self._tb = None
        if tensorboard:
            self._tb = _summary_writer(self.run_dir / "tb")
        self._bar = None
        if progress_bar:
            from tqdm import tqdm
            self._bar = tqdm(total=total_steps, initial=initial_step, desc="train", unit="step",
                             dynamic_ncols=True)

    def write(self, step: int, metrics: dict[str, Any], progress: bool = True) -> None:
        """Append one record; `progress=False` (an evaluation-only record) leaves the bar where it is."""
        record = {"step": int(step), **{k: _clean(v) for k, v in metrics.items()}}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
        if self._tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, int(step))
            self._tb.flush()
        if self._bar is not None and progress:
            shown = {k: record[k] for k in ("acc@1", f"acc@{_max_turn(record)}", "loss/policy")
                     if record.get(k) is not None}
            self._bar.set_postfix({k: f"{v:.3g}" for k, v in shown.items()}, refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _max_turn(record: dict[str, Any]) -> int:
    turns = [int(k.split("@", 1)[1]) for k in record if k.startswith("acc@") and k[4:].isdigit()]
    return max(turns) if turns else 1
