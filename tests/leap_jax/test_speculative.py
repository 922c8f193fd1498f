"""leap_jax/sampling/speculative.py: prompt-lookup drafts against a second (pure Python)
implementation, and speculative acceptance against the target distribution it must reproduce:
the greedy chain at temperature 0, and with sampling the first emitted token ~ p_0, the second ~ p_1
given the first was the draft, under temperature and top-k/top-p filtering."""
from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.sampling.speculative import accept_drafts, check_draft_settings, lookup_drafts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.draft_potential import lookup_draft  # noqa: E402


@pytest.mark.parametrize("ngrams,k", [((1,), 3), ((3,), 4), ((4, 3, 2), 8), ((2, 5), 2)])
def test_lookup_drafts_match_the_python_lookup(ngrams, k) -> None:
    rng = np.random.default_rng(k)
    b, width = 64, 24
    hist = rng.integers(0, 3, size=(b, width)).astype(np.int32)
    length = rng.integers(0, width + 1, size=b).astype(np.int32)
    draft, dlen = jax.jit(lookup_drafts, static_argnums=(2, 3))(hist, length, ngrams, k)
    draft, dlen = np.asarray(draft), np.asarray(dlen)
    for r in range(b):
        want = lookup_draft(hist[r, :length[r]].tolist(), ngrams, k)
        assert dlen[r] == len(want), (r, hist[r, :length[r]], want)
        assert draft[r, :dlen[r]].tolist() == want and (draft[r, dlen[r]:] == -1).all()


def test_lookup_draft_settings_are_checked() -> None:
    assert check_draft_settings([3, 2, 3], 4) == ((2, 3), 4)
    with pytest.raises(ValueError, match=r"draft_ngrams=\[0\]"):
        check_draft_settings([0], 4)
    with pytest.raises(ValueError, match="k=0"):
        lookup_drafts(np.zeros((1, 4), np.int32), np.array([4]), (2,), 0)
    with pytest.raises(ValueError, match=r"draft \(2, 2\)"):
        accept_drafts(np.zeros((2, 4, 5), np.float32), np.zeros((2, 2), np.int32), np.array([2, 2]),
                      jax.random.PRNGKey(0), 1.0, 1.0, 0)


def _logits(rows: list[list[float]]) -> np.ndarray:
    return np.log(np.asarray(rows, np.float64)).astype(np.float32)


def test_greedy_acceptance_is_the_argmax_chain() -> None:
    # argmax per position: 2, 0, 4, 1
    lg = np.zeros((3, 4, 5), np.float32)
    for j, a in enumerate([2, 0, 4, 1]):
        lg[:, j, a] = 5.0
    draft = np.array([[2, 0, 4], [2, 3, 4], [1, 0, 4]], np.int32)
    n_acc, nxt = accept_drafts(lg, draft, np.array([3, 3, 3]), jax.random.PRNGKey(0), 0.0, 1.0, 0)
    assert np.asarray(n_acc).tolist() == [3, 1, 0]
    assert np.asarray(nxt).tolist() == [1, 0, 2]  # the bonus token, then the argmax at the mismatch
    # a shorter draft: only its tokens count
    n_acc, nxt = accept_drafts(lg, draft, np.array([1, 0, 2]), jax.random.PRNGKey(0), 0.0, 1.0, 0)
    assert np.asarray(n_acc).tolist() == [1, 0, 0] and np.asarray(nxt).tolist() == [0, 2, 2]


def _draw(p0, p1, d, draft_len, n, temperature=1.0, top_p=1.0, top_k=0, seed=0):
    """n independent rows with the same logits: the first two emitted tokens per row (-1 where the
    row emitted one token only)."""
    lg = np.broadcast_to(_logits([p0, p1, p1])[None], (n, 3, len(p0)))
    draft = np.broadcast_to(np.asarray(d, np.int32)[None], (n, 2))
    n_acc, nxt = jax.jit(accept_drafts, static_argnums=(7,))(
        jnp.asarray(lg), jnp.asarray(draft), jnp.full((n,), draft_len, jnp.int32), jax.random.PRNGKey(seed),
        temperature, top_p, top_k, None)
    n_acc, nxt = np.asarray(n_acc), np.asarray(nxt)
    first = np.where(n_acc >= 1, d[0], nxt)
    second = np.where(n_acc >= 2, d[1], np.where(n_acc == 1, nxt, -1))
    return first, second


def _tempered(p, temperature=1.0, top_k=0, top_p=1.0):
    q = np.asarray(p, np.float64) ** (1.0 / temperature)
    q /= q.sum()
    order = np.argsort(-q, kind="stable")
    keep = np.zeros(len(q), bool)
    mass = 0.0
    for rank, i in enumerate(order):
        if (top_k and rank >= top_k) or mass >= top_p:
            break
        keep[i] = True
        mass += q[i]
    q = np.where(keep, q, 0.0)
    return q / q.sum()


def _close(samples, p, n):
    freq = np.bincount(samples, minlength=len(p)) / len(samples)
    tol = 5 * np.sqrt(np.asarray(p) * (1 - np.asarray(p)) / len(samples)) + 2e-3
    assert np.all(np.abs(freq - p) <= tol), (freq, p, n)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 3, 1.0),
                                                     (1.0, 0, 0.8)])
@pytest.mark.parametrize("draft_len", [0, 1, 2])
def test_emitted_tokens_follow_the_target(temperature, top_k, top_p, draft_len) -> None:
    p0 = [0.1, 0.4, 0.2, 0.25, 0.05]
    p1 = [0.3, 0.05, 0.15, 0.1, 0.4]
    d = [3, 4]  # a likely draft; the rejection path carries the rest of the mass
    n = 40000
    first, second = _draw(p0, p1, d, draft_len, n, temperature, top_p, top_k)
    q0, q1 = _tempered(p0, temperature, top_k, top_p), _tempered(p1, temperature, top_k, top_p)
    _close(first, q0, "first")
    if draft_len >= 1:  # given the first token was the draft, the second follows p1
        after = second[first == d[0]]
        assert (after >= 0).all() and len(after) > 5000
        _close(after, q1, "second")


def test_a_draft_outside_the_filtered_set_is_always_rejected() -> None:
    p0 = [0.5, 0.3, 0.15, 0.04, 0.01]
    first, _ = _draw(p0, p0, [4, 0], 2, 20000, top_k=2)
    assert set(np.unique(first).tolist()) <= {0, 1}
    _close(first, _tempered(p0, top_k=2), "first")
