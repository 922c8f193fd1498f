"""leap_jax.sampling: bucketed, jitted KV-cache generation (see sampler.py)."""
from leap_jax.sampling.params import SamplingParams
from leap_jax.sampling.sampler import DecodeResult, SampleOutput, Sampler, decode, prefill

__all__ = ["SamplingParams", "Sampler", "SampleOutput", "DecodeResult", "prefill", "decode"]
