"""leap_jax.rl"""
