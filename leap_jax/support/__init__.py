"""leap_jax.support: small helpers any layer may import; they import nothing else of leap_jax."""
