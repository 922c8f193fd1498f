"""LEAP-JAX: multi-turn RL for CUDA kernel generation (policy, sampler, RL math, trainer)."""
__version__ = "0.1.0"
