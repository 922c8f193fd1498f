"""leap_jax.models"""
