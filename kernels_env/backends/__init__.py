"""Execution backends: `cupy` (GPU) and `cpu` (CUDA C emulated on the host), chosen by `get_device`."""
