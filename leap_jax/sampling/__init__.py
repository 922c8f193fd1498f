"""leap_jax.sampling: bucketed, jitted KV-cache generation (see sampler.py).

Names resolve lazily (PEP 562): `from leap_jax.sampling import Sampler` imports sampler.py (and JAX),
while config validation reads `leap_jax.sampling.params` (plain Python and NumPy) without JAX.
"""
from __future__ import annotations

from leap_jax.support.lazy_exports import lazy_exports

_EXPORTS = {
    "params": ("SamplingParams", "check_preempt"),
    "decode_base": ("DecodeResult",),
    "sampler": ("SampleOutput", "Sampler", "decode", "prefill"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
