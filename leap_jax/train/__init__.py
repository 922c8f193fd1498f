"""leap_jax.train"""
