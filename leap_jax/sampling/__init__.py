"""leap_jax.sampling"""
