"""`python -m leap_jax.experiment`: the experiment driver (leap_jax/experiment/driver.py)."""
from leap_jax.experiment.driver import main

raise SystemExit(main())
