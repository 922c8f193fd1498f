"""The `cpu` backend: CUDA C device code translated to C++, built with the host compiler and run
block by block, each block's threads as cooperative fibers (DESIGN 3.6). Correctness only."""
from kernels_env.backends.cpu.device import CpuDevice, CpuProgram

__all__ = ["CpuDevice", "CpuProgram"]
