"""leap_jax.rollout"""
