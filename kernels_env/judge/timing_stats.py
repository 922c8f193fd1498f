"""Pure statistics and run planning of the timing stage (DESIGN 3.3 step 4).

The harness times a kernel in batches of runs until the median is known well enough. Everything
here is a pure function of numbers, so the stopping and batch-size rules are unit-tested without a
device:
  `median_ci`        a distribution-free confidence interval for the median (order statistics);
  `ci_rel_width`     its width relative to the median, the stopping criterion;
  `next_batch`       how many runs (and warm-up runs) the next batch may take, or 0 to stop.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

CONFIDENCE = 0.95  # of the median's interval
EXACT_UP_TO = 1000  # runs: exact binomial ranks up to here, the normal approximation above
# How much slower than planned a batch may run and still end inside the stage: a loaded host ran 2.5x
# slower than the probe predicted and turned a slow but correct kernel into a timeout.
SLOWDOWN_MARGIN = 4.0


def _lower_rank(n: int, confidence: float) -> int:
    """The largest 1-based rank k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2, at least 1.

    [x_(k), x_(n-k+1)] then covers the median with probability >= confidence whatever the
    distribution of the run times (for n < 6 no rank qualifies at 95%: the range is returned)."""
    alpha = (1.0 - confidence) / 2.0
    if n > EXACT_UP_TO:
        z = statistics.NormalDist().inv_cdf(1.0 - alpha)
        return max(1, math.floor((n - z * math.sqrt(n)) / 2.0))
    total, cum, k = 2 ** n, 0, 0
    while k < n and (cum + math.comb(n, k)) / total <= alpha:
        cum += math.comb(n, k)
        k += 1
    return max(1, k)


def median_ci(samples: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(low, high): a distribution-free confidence interval for the median of `samples`."""
    if not samples:
        raise ValueError("median_ci of no samples; expected at least one run time")
    xs = sorted(samples)
    k = _lower_rank(len(xs), confidence)
    return xs[k - 1], xs[len(xs) - k]


def ci_rel_width(samples: list[float], confidence: float = CONFIDENCE) -> float:
    """The width of the median's confidence interval relative to the median (inf for a zero median)."""
    lo, hi = median_ci(samples, confidence)
    med = statistics.median(samples)
    if med <= 0:
        return 0.0 if hi == lo else math.inf
    return (hi - lo) / med


@dataclass(frozen=True)
class Plan:
    """What the timing loop knows when it picks the next batch."""
    timed: int  # timed runs so far
    warmup_left: int  # warm-up runs not yet done
    per_run_s: float  # the cost of one run (wall clock, preparation and checks included)
    allowance_s: float  # seconds this measurement may still take (stage limit share)
    budget_left_s: float  # seconds of the adaptive budget left (bounds runs past the minimum)
    min_runs: int
    max_runs: int
    max_batch: int


def next_batch(p: Plan) -> tuple[int, int]:
    """(warm-up runs, timed runs) of the next batch; (0, 0) to stop.

    Below the minimum, runs are limited only by the stage's allowance: a slow kernel gets as many
    timed runs as fit, its warm-up dropped first (`warmup_left` runs are skipped when they do not
    fit along with a timed run). Every batch is planned to fit the allowance left even if its runs
    take SLOWDOWN_MARGIN (4x) the time `per_run_s` predicts (a loaded host, a clock that changes):
    a batch that does not fit that way is not started, and the runs already done are the result,
    never a timeout. The next batch is planned on the new cost. Past the minimum (and only while the
    caller's precision criterion is unmet), batches grow geometrically within the adaptive budget
    and `max_runs`."""
    if p.timed >= p.max_runs:
        return 0, 0
    per_run = max(p.per_run_s, 1e-6)
    fit = math.floor(0.9 * p.allowance_s / (SLOWDOWN_MARGIN * per_run))
    if p.timed >= p.min_runs:
        fit = min(fit, math.floor(p.budget_left_s / per_run))
        want = max(p.timed // 2, 5)
    else:
        want = p.min_runs - p.timed
    warmup = p.warmup_left if fit >= p.warmup_left + 1 else 0
    runs = min(want, p.max_runs - p.timed, fit - warmup, max(1, p.max_batch - warmup))
    return (warmup, runs) if runs >= 1 else (0, 0)
