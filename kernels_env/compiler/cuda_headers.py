"""Where the CUDA headers are: NVRTC's include path, and the only headers a submission may include.

Both the compiler (`compile.nvrtc_options`, `compile.check_includes`) and the std prelude (whether
libcu++ is there) ask; the pool lets its sandboxed workers read these directories.
"""
from __future__ import annotations

import functools
import glob
import os
import sys


@functools.lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """Directories holding the CUDA headers NVRTC needs (cuda_fp16.h, cuda_bf16.h, ...).

    Looked up in $CUDA_PATH, $CUDA_HOME, /usr/local/cuda* and the pip wheels' nvidia/*/include.
    """
    cands: list[str] = []
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "include"))
    cands += ["/usr/local/cuda/include"] + sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True)
    for sp in sys.path:
        cands += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "include")))
    for d in cands:
        d = os.path.realpath(d)
        if os.path.isfile(os.path.join(d, "cuda_fp16.h")):
            cccl = os.path.join(d, "cccl")  # libcu++ (cuda/std/...), needed by cooperative_groups.h
            return (d, cccl) if os.path.isdir(cccl) else (d,)  # one CUDA header set, never mixed
    return ()
