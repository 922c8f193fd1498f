"""Tensor-by-tensor safetensors reading and streaming writing, with bfloat16 through ml_dtypes.

Why not `safetensors.numpy.save_file`: it needs every tensor of a shard in host memory at once.
The writer here takes *producers* (callables returning one numpy array), computes the header from
the declared shapes/dtypes, and writes each tensor as soon as it is produced, so exporting a model
holds at most one tensor's host copy beside the params. Reading goes through
`safetensors.safe_open(framework="numpy")` (memory-mapped); where an older safetensors cannot hand
out bfloat16 as numpy, the tensor's bytes are read from the file's header offsets instead.

File format (the public safetensors spec): u64 little-endian header length N, N bytes of JSON
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}` (padded with spaces
to a multiple of 8), then the raw little-endian tensor bytes; offsets are relative to the data start.
"""
from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
from safetensors import safe_open

# safetensors dtype code <-> numpy dtype.
_CODE_TO_DTYPE: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16), "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_DTYPE_TO_CODE: dict[np.dtype, str] = {v: k for k, v in _CODE_TO_DTYPE.items()}

# Names accepted wherever a float dtype is asked for ("bfloat16", "bf16", np.float32, jnp.bfloat16...).
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
                  "float": "float32"}


def as_np_dtype(dtype: Any) -> np.dtype:
    """Normalise a dtype given as a string (`"bfloat16"`, `"bf16"`, ...) or a numpy/jax dtype."""
    if isinstance(dtype, str):
        name = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
        if name == "bfloat16":
            return np.dtype(ml_dtypes.bfloat16)
        try:
            return np.dtype(name)
        except TypeError:
            raise ValueError(f"unknown dtype {dtype!r}; expected e.g. 'float32', 'bfloat16', 'float16'") from None
    return np.dtype(dtype)


def dtype_name(dtype: Any) -> str:
    """The canonical string name (`"bfloat16"`, `"float32"`, ...) of a numpy/jax dtype."""
    return as_np_dtype(dtype).name


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lives: its file, safetensors dtype code and shape."""
    name: str
    file: str
    dtype_code: str
    shape: tuple[int, ...]


def read_header(path: str) -> tuple[dict[str, Any], int]:
    """Parse a safetensors file's JSON header; returns (header, byte offset of the data section)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", raw)
        size = os.path.getsize(path)
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds the file size {size}; file truncated?")
        try:
            header = json.loads(f.read(n))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: safetensors header is not valid JSON ({e})") from None
    return header, 8 + n


def list_tensors(path: str) -> dict[str, TensorInfo]:
    """All tensors of one file by name (header only; no data is read)."""
    header, _ = read_header(path)
    return {name: TensorInfo(name, path, meta["dtype"], tuple(meta["shape"]))
            for name, meta in header.items() if name != "__metadata__"}


class SafetensorsReader:
    """Reads named tensors from a set of safetensors files, one tensor at a time (memory-mapped).

    Use as a context manager; `get(name)` returns a numpy array (bfloat16 as ml_dtypes.bfloat16).
    """

    def __init__(self, tensors: dict[str, TensorInfo]):
        self.tensors = tensors
        self._handles: dict[str, Any] = {}

    def __enter__(self) -> SafetensorsReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for h in self._handles.values():
            exit_ = getattr(h, "__exit__", None)
            if exit_ is not None:
                exit_(None, None, None)
        self._handles.clear()

    def _handle(self, file: str) -> Any:
        h = self._handles.get(file)
        if h is None:
            h = safe_open(file, framework="numpy")
            h = h.__enter__() if hasattr(h, "__enter__") else h
            self._handles[file] = h
        return h

    def get(self, name: str) -> np.ndarray:
        info = self.tensors[name]
        if info.dtype_code not in _CODE_TO_DTYPE:
            raise ValueError(f"{info.file}: tensor {name!r} has dtype {info.dtype_code}, which "
                             f"is not supported (expected one of {sorted(_CODE_TO_DTYPE)})")
        try:
            return self._handle(info.file).get_tensor(name)
        except Exception:  # e.g. an older safetensors that cannot give bfloat16 to numpy
            return _read_raw(info)


def _read_raw(info: TensorInfo) -> np.ndarray:
    """Fallback reader straight from the header offsets (memory-mapped, then copied)."""
    header, data_start = read_header(info.file)
    begin, end = header[info.name]["data_offsets"]
    dt = _CODE_TO_DTYPE[info.dtype_code]
    mm = np.memmap(info.file, dtype=np.uint8, mode="r", offset=data_start + begin, shape=(end - begin,))
    return np.array(mm.view(dt).reshape(info.shape))


@dataclass(frozen=True)
class PlannedTensor:
    """A tensor to write: its declared shape/dtype and a producer called exactly once at write time."""
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    produce: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def write_safetensors(path: str, tensors: Iterable[PlannedTensor],
                      metadata: dict[str, str] | None = None) -> int:
    """Write one safetensors file, producing and writing tensors one by one; returns data bytes.

    Raises ValueError if a producer's array does not match its declared shape or dtype.
    """
    tensors = list(tensors)
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for t in tensors:
        if t.dtype not in _DTYPE_TO_CODE:
            raise ValueError(f"tensor {t.name!r}: dtype {t.dtype} cannot be stored in safetensors")
        header[t.name] = {"dtype": _DTYPE_TO_CODE[t.dtype], "shape": list(t.shape),
                          "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors:
            arr = np.asarray(t.produce())
            if arr.shape != tuple(t.shape) or arr.dtype != t.dtype:
                raise ValueError(f"tensor {t.name!r}: producer gave shape {arr.shape} dtype {arr.dtype}; "
                                 f"declared {tuple(t.shape)} {t.dtype}")
            arr = np.ascontiguousarray(arr)
            if arr.dtype.byteorder == ">":
                arr = arr.astype(arr.dtype.newbyteorder("<"))
            f.write(arr.reshape(-1).view(np.uint8).data)  # a memoryview of the bytes
            del arr
    os.replace(tmp, path)
    return offset
