"""LEAP against its baselines: the experiment driver (`driver`: `python -m leap_jax.experiment`), the
page it writes (`report`, `sections`, `claims`, `plots`), the statistics (`stats`), the protocol check
(`protocol`) and the per-run plots and summary (`runs_report`: `leap-report`). Free of JAX: the driver
starts each run as a subprocess."""
