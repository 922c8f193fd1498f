#!/usr/bin/env python
"""Can device code read or write the host memory of the process that launched it? (GPU machine)

With HMM (heterogeneous memory management: Linux 6.1+, NVIDIA's open kernel modules, CUDA 12.2+)
a GPU kernel dereferences any pointer of its process's address space, malloc'd memory included.
A submitted kernel then reaches the exec worker's host memory wherever it can name an address,
e.g. the ELF header of an interpreter built without PIE, always at 0x400000. This prints what
decides it, as JSON lines:

- `facts`: the driver (open or proprietary module), `uvm_disable_hmm`, the device attributes
  `pageableMemoryAccess` (88) and `pageableMemoryAccessUsesHostPageTables` (100), and whether this
  Python's executable is position-independent (ELF type 3) or fixed (type 2: it loads at 0x400000).
- one line per probe, each in its own child process (a fault leaves the CUDA context unusable):
  `heap` a trusted kernel given a NumPy buffer's host address reads a word and writes another;
  `exe` reads the first word of this process's executable mapping (from /proc/self/maps);
  `fixed` reads 0x400000. `read` is what the kernel saw (0x464c457f = "\\x7fELF"), `host_after`
  the host word the kernel wrote (0xbeef when the write landed), `error` the CUDA error otherwise.

    python scripts/host_memory_probe.py

The hostile corpus case `reads_host_memory_at_a_fixed_address` is the same attack submitted
through the environment (docs/THREAT_MODEL.md).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys

ELF_MAGIC = 0x464C457F
PROBE_SOURCE = r'''
extern "C" __global__ void probe(unsigned long long addr, unsigned int* out, int write) {
    out[0] = *(volatile const unsigned int*)addr;
    if (write) *(volatile unsigned int*)(addr + 4) = 0xbeefu;
    out[1] = 1u;
}
'''


def _elf_type(path: str) -> int | None:
    """2 (ET_EXEC: fixed load address) or 3 (ET_DYN: position-independent), None if unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(18)
        return int.from_bytes(head[16:18], "little") if head[:4] == b"\x7fELF" else None
    except OSError:
        return None


def _read_first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return None


def facts() -> dict:
    import cupy as cp
    rt = cp.cuda.runtime
    exe = os.path.realpath(sys.executable)
    out = {"probe": "facts", "driver": rt.driverGetVersion(), "runtime": rt.runtimeGetVersion(),
           "module": _read_first_line("/proc/driver/nvidia/version"),
           "uvm_disable_hmm": _read_first_line("/sys/module/nvidia_uvm/parameters/uvm_disable_hmm"),
           "executable": exe, "executable_elf_type": _elf_type(exe)}
    for name, attr in (("pageable_memory_access", 88), ("pageable_uses_host_page_tables", 100)):
        try:
            out[name] = rt.deviceGetAttribute(attr, 0)
        except Exception as e:  # an attribute this runtime does not know
            out[name] = f"error: {e}"
    return out


def _exe_base() -> int | None:
    exe = os.path.realpath(sys.executable)
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.realpath(parts[5]) == exe:
                return int(parts[0].split("-")[0], 16)
    return None


def _probe(kind: str, conn) -> None:
    """Child: launch the probe kernel on one address and send what happened."""
    import numpy as np
    import cupy as cp
    res: dict = {"probe": kind}
    host = np.array([0xC0FFEE, 0], dtype=np.uint32)
    try:
        addr = {"heap": host.ctypes.data, "exe": _exe_base(), "fixed": 0x400000}[kind]
        res["address"] = None if addr is None else hex(addr)
        if addr is None:
            raise RuntimeError("no address for this probe")
        out = cp.zeros(2, dtype=cp.uint32)
        kernel = cp.RawKernel(PROBE_SOURCE, "probe")
        kernel((1,), (1,), (np.uint64(addr), out, np.int32(kind == "heap")))
        cp.cuda.Device().synchronize()
        got = out.get()
        res.update(read=hex(int(got[0])), ran=bool(got[1]), elf_magic=int(got[0]) == ELF_MAGIC)
        if kind == "heap":
            res.update(read_matches=int(got[0]) == 0xC0FFEE, host_after=hex(int(host[1])),
                       write_landed=int(host[1]) == 0xBEEF)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    conn.send(res)


def run_probe(kind: str, timeout: float = 60.0) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_probe, args=(kind, child))
    p.start()
    res = parent.recv() if parent.poll(timeout) else {"probe": kind, "error": f"no answer in {timeout:.0f} s"}
    p.join(5)
    if p.is_alive():
        p.kill()
    return res


def main() -> int:
    try:
        print(json.dumps(facts()), flush=True)
    except Exception as e:
        print(json.dumps({"probe": "facts", "error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    for kind in ("heap", "exe", "fixed"):
        print(json.dumps(run_probe(kind)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
