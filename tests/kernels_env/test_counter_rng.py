"""counter_rng: the NumPy formula against a pure-Python SplitMix64, the distributions' statistics,
and (GPU) the CuPy kernels against the NumPy path."""
import math

import numpy as np
import pytest

from kernels_env.execute import counter_rng as cr

gpu = pytest.mark.gpu


def splitmix64_reference(seed: int, n: int) -> list[int]:
    """SplitMix64 as published: state += GOLDEN; mix(state) — Python ints, mod 2**64."""
    m = (1 << 64) - 1
    out, state = [], seed & m
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & m
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        out.append(z ^ (z >> 31))
    return out


@pytest.mark.parametrize("key", [0, 1, 123456789, (1 << 63) - 25, (1 << 64) - 1])
def test_words_are_splitmix64(key):
    assert cr.words(key, 50).tolist() == splitmix64_reference(key, 50)


def test_streams_are_disjoint_slices_of_one_sequence():
    w1 = cr.words(7, 10, stream=1)
    c0 = 1 << cr.STREAM_SHIFT  # stream 1 starts at counter 2**40
    ref = splitmix64_reference((7 + c0 * cr.GOLDEN) & ((1 << 64) - 1), 10)
    assert w1.tolist() == ref
    assert not np.array_equal(w1, cr.words(7, 10, stream=0))


def test_uniform_range_and_moments():
    x = cr.uniform(np, 11, (200_000,), -2.0, 3.0)
    assert x.dtype == np.float32 and x.shape == (200_000,)
    assert x.min() >= -2.0 and x.max() < 3.0
    assert abs(x.mean() - 0.5) < 0.02 and abs(x.var() - 25 / 12) < 0.03
    counts = np.histogram(x, bins=10, range=(-2, 3))[0]
    assert counts.min() > 0.95 * 20_000 and counts.max() < 1.05 * 20_000
    # the top is excluded even where float32 rounding would reach it
    assert cr.uniform(np, 3, (1000,), 1.0, 1.0000001).max() < np.float32(1.0000001)


def test_normal_moments_and_tails():
    z = cr.normal(np, 5, (400, 1000)).astype(np.float64)
    assert z.shape == (400, 1000)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs(((z - z.mean()) ** 4).mean() / z.var() ** 2 - 3.0) < 0.1  # kurtosis of a normal
    assert abs((np.abs(z) > 2).mean() - 0.0455) < 0.003
    assert np.abs(z).max() <= math.sqrt(-2 * math.log(2.0 ** -32)) + 1e-6


def test_student_t_has_heavy_tails():
    t = cr.student_t(np, 9, (300_000,), dof=3).astype(np.float64)
    # P(|t_3| > 4) = 0.0280; a normal's is 6e-5
    assert abs((np.abs(t) > 4).mean() - 0.0280) < 0.003
    assert abs(np.median(t)) < 0.02
    with pytest.raises(ValueError, match="dof=0"):
        cr.student_t(np, 9, (3,), dof=0)


def test_integers_cover_the_range_evenly():
    x = cr.integers(np, 4, (70_000,), -3, 4)
    assert x.dtype == np.int64 and x.min() == -3 and x.max() == 3
    counts = np.bincount(x + 3)
    assert counts.min() > 0.95 * 10_000 and counts.max() < 1.05 * 10_000
    big = cr.integers(np, 4, (50_000,), 0, 1 << 20)
    assert big.max() > (1 << 20) - 200 and big.min() < 200


def test_keys_give_independent_streams_and_bad_arguments_are_named():
    a, b = cr.normal(np, 1, (10_000,)), cr.normal(np, 2, (10_000,))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05
    with pytest.raises(ValueError, match=r"key=-1"):
        cr.words(-1, 3)
    with pytest.raises(ValueError, match=r"low < high"):
        cr.uniform(np, 1, (3,), 2.0, 2.0)
    with pytest.raises(ValueError, match=r"shape="):
        cr.normal(np, 1, (-1, 3))
    assert cr.uniform(np, 1, (0, 4)).shape == (0, 4)


def test_draws_into_a_given_array_are_the_same_numbers_and_bad_ones_are_named():
    shape, key = (37, 53), 99
    for draw, dtype in ((lambda o: cr.uniform(np, key, shape, -2.0, 3.0, out=o), "float32"),
                        (lambda o: cr.normal(np, key, shape, stream=2, out=o), "float32"),
                        (lambda o: cr.student_t(np, key, shape, 3, out=o), "float32"),
                        (lambda o: cr.integers(np, key, shape, -5, 9, out=o), "int64")):
        out = np.zeros(shape, dtype)
        got = draw(out)
        assert got is out or np.shares_memory(got, out)
        np.testing.assert_array_equal(out, draw(None))
        for bad in (np.zeros(shape, "float64" if dtype == "float32" else "int32"), np.zeros((37, 52), dtype),
                    np.zeros((53, 74), dtype)[:, ::2]):
            with pytest.raises(ValueError, match=f"out: a .*; expected a C-contiguous {dtype} array of 1961"):
                draw(bad)


def test_uniform_stays_below_high_after_rounding():
    # in [1e6, 1e6 + 1) float32 steps by 1/16: the samples above 1e6 + 29/32 (~9%) round to the top
    # (1e6 + 1, excluded) or the float32 below it, and all must end below
    top = np.nextafter(np.float32(1e6 + 1), np.float32(0))
    for out in (None, np.empty(4096, np.float32)):
        got = cr.uniform(np, 5, (4096,), 1e6, 1e6 + 1, out=out)
        assert got.max() == top and 300 < (got == top).sum() < 480


@gpu
def test_cupy_kernels_match_the_numpy_formula():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU")
    except Exception:
        pytest.skip("no GPU")
    shape, key = (1000, 1001), 0x1234_5678_9ABC
    pairs = [
        (cr.uniform(cupy, key, shape, -1.5, 2.5, stream=2), cr.uniform(np, key, shape, -1.5, 2.5, stream=2)),
        (cr.integers(cupy, key, shape, -7, 1 << 30), cr.integers(np, key, shape, -7, 1 << 30)),
    ]
    # samples that round to the excluded top in float32: the kernel's clamp, as NumPy's
    pairs += [(cr.uniform(cupy, key, shape, 1e6, 1e6 + 1), cr.uniform(np, key, shape, 1e6, 1e6 + 1)),
              (cr.uniform(cupy, key, shape, -1.5, 2.5, stream=2, out=cupy.zeros(shape, cupy.float32)),
               cr.uniform(np, key, shape, -1.5, 2.5, stream=2)),
              (cr.integers(cupy, key, shape, -7, 1 << 30, out=cupy.zeros(shape, cupy.int64)),
               cr.integers(np, key, shape, -7, 1 << 30))]
    for got, want in pairs:
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(cupy.asnumpy(got), want)
    into = cupy.zeros(shape, cupy.float32)
    assert cr.normal(cupy, key, shape, stream=1, out=into).data.ptr == into.data.ptr
    cupy.testing.assert_array_equal(into, cr.normal(cupy, key, shape, stream=1))
    for got, want in ((cr.normal(cupy, key, shape, stream=1), cr.normal(np, key, shape, stream=1)),
                      (cr.student_t(cupy, key, shape, 3), cr.student_t(np, key, shape, 3))):
        g = cupy.asnumpy(got)
        assert g.dtype == np.float32 and g.shape == shape
        # libm log/cos may round differently in the last bit: at most one float32 ulp apart
        ulps = np.abs(g.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
        assert ulps.max() <= 2 and (ulps == 0).mean() > 0.99
