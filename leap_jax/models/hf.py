"""Load and save HF Llama/Qwen2-family checkpoints (config.json + safetensors) as our params pytree.

`load_hf_checkpoint(dir)` reads config.json (and generation_config.json for EOS ids), finds the
tensors (model.safetensors, or shards through model.safetensors.index.json), validates every name
and shape from the headers alone, then fills each stacked (layer-leading, (in, out)) array, which is
allocated once, layer by layer from memory-mapped files: the host never holds two full copies.
`save_hf_checkpoint(dir, config, params)` writes the same format back, tensor by tensor, sharded
above `max_shard_bytes`, so `transformers.AutoModelForCausalLM.from_pretrained(dir)` loads it.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any

import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)
import numpy as np

from leap_jax.models.config import ModelConfig
from leap_jax.models.hf_names import IGNORED_SUFFIXES, ParamSpec, param_specs, zero_o_proj_bias_names
from leap_jax.models.safetensors_io import (PlannedTensor, SafetensorsReader, TensorInfo, as_np_dtype,
                                            dtype_name, list_tensors, write_safetensors)

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
DEFAULT_MAX_SHARD_BYTES = 5 * 1000**3  # HF's default "5GB"
_PARAM_DTYPES = ("float32", "bfloat16", "float16")


class CheckpointError(ValueError):
    """A HF model directory that cannot be loaded as (or saved from) our layout."""


# ----------------------------------------------------------------------------------------- load


def read_hf_config(path: str, **overrides: Any) -> ModelConfig:
    """ModelConfig from `path/config.json`, with EOS/BOS/PAD ids from generation_config.json when present."""
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"HF checkpoint {path!r} is not a directory; expected a model directory "
                                "with config.json and *.safetensors")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"{path}: no config.json; expected a HF model directory "
                                "(config.json + model.safetensors or sharded safetensors with an index)")
    d = _read_json(cfg_path)
    if d.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{cfg_path}: hidden_act={d['hidden_act']!r}; only 'silu' (SwiGLU) is supported")
    if d.get("mlp_bias"):
        raise CheckpointError(f"{cfg_path}: mlp_bias=true is not supported (our MLP has no biases)")
    rope = d.get("rope_parameters") or {}
    if isinstance(rope, dict) and rope.get("rope_type", "default") != "default":
        raise CheckpointError(f"{cfg_path}: rope_parameters={rope!r}; only plain RoPE "
                              "(rope_type 'default') is supported")
    if d.get("use_sliding_window"):
        raise CheckpointError(f"{cfg_path}: use_sliding_window=true; sliding-window attention is not "
                              "supported (full causal attention only)")
    window = d.get("sliding_window")
    if (d.get("model_type") == "mistral" or "MistralForCausalLM" in (d.get("architectures") or [])) \
            and window is not None and window < d.get("max_position_embeddings", 4096):
        raise CheckpointError(f"{cfg_path}: sliding_window={window} < max_position_embeddings="
                              f"{d.get('max_position_embeddings')}; sliding-window attention is not "
                              "supported (full causal attention only)")
    try:
        config = ModelConfig.from_hf_dict(d)
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"{cfg_path}: {e}") from None
    gen_path = os.path.join(path, "generation_config.json")
    if os.path.isfile(gen_path):
        g = _read_json(gen_path)
        changes: dict[str, Any] = {}
        eos = g.get("eos_token_id")
        if eos is not None:
            changes["eos_token_ids"] = tuple(eos) if isinstance(eos, (list, tuple)) else (eos,)
        for key in ("bos_token_id", "pad_token_id"):
            if getattr(config, key) is None and g.get(key) is not None:
                changes[key] = g[key]
        config = config.replace(**changes)
    return config.replace(**overrides) if overrides else config


def find_tensors(path: str) -> dict[str, TensorInfo]:
    """Every tensor in the directory's safetensors files, from their headers (no data read)."""
    index_path = os.path.join(path, INDEX_NAME)
    if os.path.isfile(index_path):
        weight_map = _read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index_path}: no 'weight_map' object; expected "
                                  "{'weight_map': {tensor_name: file_name}}")
        files = sorted(set(weight_map.values()))
        for f in files:
            if not os.path.isfile(os.path.join(path, f)):
                raise CheckpointError(f"{index_path} names shard {f!r}, which is not in {path}")
    elif os.path.isfile(os.path.join(path, SINGLE_NAME)):
        weight_map, files = None, [SINGLE_NAME]
    else:
        files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(path, "*.safetensors")))
        weight_map = None
        if not files:
            other = [os.path.basename(f) for f in glob.glob(os.path.join(path, "*.bin"))
                     + glob.glob(os.path.join(path, "*.pt*"))]
            hint = f" (found {other}: only safetensors are supported)" if other else ""
            raise CheckpointError(f"{path}: no {SINGLE_NAME}, no {INDEX_NAME} and no *.safetensors{hint}")
    tensors: dict[str, TensorInfo] = {}
    for f in files:
        for name, info in list_tensors(os.path.join(path, f)).items():
            if name in tensors:
                raise CheckpointError(f"tensor {name!r} is in both {tensors[name].file} and {info.file}")
            tensors[name] = info
    if weight_map is not None:
        for name, f in weight_map.items():
            if name in tensors and os.path.basename(tensors[name].file) != f:
                raise CheckpointError(f"{index_path} puts {name!r} in {f}, but it is in "
                                      f"{tensors[name].file}")
            if name not in tensors:
                raise CheckpointError(f"{index_path} lists tensor {name!r} in {f}, but {f} has no such tensor")
    return tensors


def load_hf_checkpoint(path: str, dtype: Any = None, *, compute_dtype: Any = None,
                       as_numpy: bool = False) -> tuple[ModelConfig, dict[str, Any]]:
    """Load a local HF Llama/Qwen2/Mistral directory into (ModelConfig, params).

    dtype: the params' dtype (default: the checkpoint's own float dtype); config.param_dtype follows
    it, and config.dtype (compute) is `compute_dtype` or the same. Params are jnp arrays, or numpy
    arrays with `as_numpy=True`. Raises FileNotFoundError / CheckpointError naming the bad file,
    tensor, expected and found shapes.
    """
    path = os.fspath(path)
    config = read_hf_config(path)
    tensors = find_tensors(path)
    specs = param_specs(config)
    _validate_tensors(path, config, specs, tensors)

    if dtype is None:
        file_dtype = _file_float_dtype(tensors[specs[0].hf_pattern])
        if file_dtype not in _PARAM_DTYPES:
            raise CheckpointError(f"{path}: tensors are {file_dtype}; pass dtype= one of {_PARAM_DTYPES}")
        dtype = file_dtype
    target = as_np_dtype(dtype)
    if target.name not in _PARAM_DTYPES:
        raise ValueError(f"load_hf_checkpoint dtype={dtype!r}; expected one of {_PARAM_DTYPES}")
    compute = dtype_name(compute_dtype) if compute_dtype is not None else target.name
    config = config.replace(param_dtype=target.name, dtype=compute)

    to_out = _identity if as_numpy else _to_jax
    params: dict[str, Any] = {}
    with SafetensorsReader(tensors) as reader:
        _check_tied_and_zero_extras(path, config, tensors, reader)
        for spec in specs:
            out = np.empty(spec.shape, dtype=target)
            if spec.stacked:
                for i, name in enumerate(spec.hf_names(config.num_layers)):
                    _fill(out[i], reader.get(name), spec.transpose)
            else:
                _fill(out, reader.get(spec.hf_pattern), spec.transpose)
            _set_path(params, spec.path, to_out(out))
            del out
    return config, params


def _fill(dst: np.ndarray, src: np.ndarray, transpose: bool) -> None:
    dst[...] = src.T if transpose else src


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _to_jax(x: np.ndarray) -> Any:
    return jnp.asarray(x)


def _file_float_dtype(info: TensorInfo) -> str:
    return {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}.get(
        info.dtype_code, info.dtype_code)


def _validate_tensors(path: str, config: ModelConfig, specs: list[ParamSpec],
                      tensors: dict[str, TensorInfo]) -> None:
    """Check every expected tensor exists with its HF shape and nothing unexpected is present."""
    problems: list[str] = []
    expected: set[str] = set()
    where = _describe_files(path, tensors)
    for spec in specs:
        for name in spec.hf_names(config.num_layers):
            expected.add(name)
            info = tensors.get(name)
            if info is None:
                problems.append(f"missing tensor {name!r} (expected shape {list(spec.hf_shape)}) in {where}")
            elif info.shape != spec.hf_shape:
                problems.append(f"tensor {name!r} in {info.file} has shape {list(info.shape)}; expected "
                                f"{list(spec.hf_shape)} for this config.json")
            elif info.dtype_code not in ("F32", "BF16", "F16", "F64"):
                problems.append(f"tensor {name!r} in {info.file} has dtype {info.dtype_code}; "
                                "expected a float dtype (F32/BF16/F16)")
    allowed_extra = set(zero_o_proj_bias_names(config))
    if config.tie_word_embeddings:
        allowed_extra.add("lm_head.weight")
    for name in allowed_extra:
        info = tensors.get(name)
        if info is not None and name == "lm_head.weight":
            want = (config.vocab_size, config.hidden_size)
            if info.shape != want:
                problems.append(f"tensor 'lm_head.weight' in {info.file} has shape {list(info.shape)}; "
                                f"expected {list(want)}")
        elif info is not None and info.shape != (config.hidden_size,):
            problems.append(f"tensor {name!r} in {info.file} has shape {list(info.shape)}; "
                            f"expected {[config.hidden_size]}")
    unexpected = sorted(n for n in tensors if n not in expected and n not in allowed_extra
                        and not n.endswith(IGNORED_SUFFIXES))
    for name in unexpected[:20]:
        problems.append(f"unexpected tensor {name!r} in {tensors[name].file} (not part of a "
                        f"{config.architecture} with this config.json)")
    if len(unexpected) > 20:
        problems.append(f"... and {len(unexpected) - 20} more unexpected tensors")
    if problems:
        head = f"{path}: checkpoint does not match its config.json ({len(problems)} problem(s)):\n  "
        raise CheckpointError(head + "\n  ".join(problems[:40]))


def _check_tied_and_zero_extras(path: str, config: ModelConfig, tensors: dict[str, TensorInfo],
                                reader: SafetensorsReader) -> None:
    """A tied model may carry lm_head.weight only as a copy of embed; o_proj biases must be zero."""
    if config.tie_word_embeddings and "lm_head.weight" in tensors:
        head = reader.get("lm_head.weight")
        if not np.array_equal(head, reader.get("model.embed_tokens.weight")):
            raise CheckpointError(f"{tensors['lm_head.weight'].file}: tie_word_embeddings=true but "
                                  "lm_head.weight differs from model.embed_tokens.weight; set "
                                  "tie_word_embeddings=false in config.json or drop lm_head.weight")
        del head
    for name in zero_o_proj_bias_names(config):
        if name in tensors and np.any(reader.get(name).astype(np.float32) != 0):
            raise CheckpointError(f"{tensors[name].file}: tensor {name!r} is non-zero; an attention "
                                  "output bias is not supported (only q/k/v biases are)")


def _describe_files(path: str, tensors: dict[str, TensorInfo]) -> str:
    files = sorted({os.path.basename(t.file) for t in tensors.values()})
    if not files:
        return f"{path} (no tensors found)"
    return f"{path}/{files[0]}" if len(files) == 1 else f"{path} (shards {', '.join(files)})"


# ----------------------------------------------------------------------------------------- save


def save_hf_checkpoint(path: str, config: ModelConfig, params: dict[str, Any], *,
                       max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, dtype: Any = None,
                       generation_config: bool = True) -> list[str]:
    """Write params as a HF checkpoint directory that transformers can load; returns files written.

    Tensors are converted and written one at a time ((in, out) -> HF (out, in), stacked layers ->
    one tensor each). Above `max_shard_bytes` the tensors are split into
    `model-0000k-of-0000n.safetensors` shards plus `model.safetensors.index.json`. dtype: the
    stored dtype (default: the params' dtype). generation_config.json carries BOS/EOS/PAD ids
    (written when any is set and `generation_config` is true).
    Previous model*.safetensors / index files in the directory are replaced.
    """
    path = os.fspath(path)
    if max_shard_bytes <= 0:
        raise ValueError(f"save_hf_checkpoint max_shard_bytes={max_shard_bytes}; expected > 0")
    specs = param_specs(config)
    _validate_params(config, specs, params)
    if dtype is None:
        dtype = np.dtype(_get_path(params, ("embed",)).dtype)
    target = as_np_dtype(dtype)
    if target.name not in _PARAM_DTYPES:
        raise ValueError(f"save_hf_checkpoint dtype={dtype!r}; expected one of {_PARAM_DTYPES}")
    hf_config = config.to_hf_dict()  # raises for layouts HF cannot express (e.g. Qwen2 without biases)
    hf_config["torch_dtype"] = target.name
    hf_config["dtype"] = target.name
    # full attention everywhere: transformers' Mistral defaults to a 4096 sliding window otherwise
    if config.architecture == "MistralForCausalLM":
        hf_config.setdefault("sliding_window", None)
    elif config.architecture == "Qwen2ForCausalLM":
        hf_config.setdefault("use_sliding_window", False)

    planned = _plan_tensors(config, specs, params, target)
    shards = _split_shards(planned, max_shard_bytes)
    os.makedirs(path, exist_ok=True)
    for old in ([os.path.join(path, SINGLE_NAME), os.path.join(path, INDEX_NAME)]
                + glob.glob(os.path.join(path, "model-*-of-*.safetensors"))):
        if os.path.isfile(old):
            os.remove(old)
    written: list[str] = []
    weight_map: dict[str, str] = {}
    total = 0
    for k, shard in enumerate(shards):
        fname = SINGLE_NAME if len(shards) == 1 else f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_safetensors(os.path.join(path, fname), shard, metadata={"format": "pt"})
        weight_map.update({t.name: fname for t in shard})
        written.append(os.path.join(path, fname))
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        written.append(_write_json(os.path.join(path, INDEX_NAME), index))
    written.append(_write_json(os.path.join(path, "config.json"), hf_config))
    gen: dict[str, Any] = {}
    if generation_config:
        gen = {k: v for k, v in (("bos_token_id", config.bos_token_id),
                                 ("eos_token_id", _eos_value(config.eos_token_ids)),
                                 ("pad_token_id", config.pad_token_id)) if v is not None}
    if gen:
        written.append(_write_json(os.path.join(path, "generation_config.json"), gen))
    return written


def _eos_value(eos: tuple[int, ...]) -> Any:
    if not eos:
        return None
    return eos[0] if len(eos) == 1 else list(eos)


def _validate_params(config: ModelConfig, specs: list[ParamSpec], params: dict[str, Any]) -> None:
    """Every leaf present with its layout shape, and no leaves this config does not have."""
    problems = []
    keys = set()
    for spec in specs:
        keys.add(spec.key)
        try:
            leaf = _get_path(params, spec.path)
        except (KeyError, TypeError):
            problems.append(f"missing param {spec.key!r} (expected shape {list(spec.shape)})")
            continue
        shape = tuple(getattr(leaf, "shape", ()))
        if shape != spec.shape:
            problems.append(f"param {spec.key!r} has shape {list(shape)}; expected {list(spec.shape)}")
    extra = sorted(k for k in _flatten_keys(params) if k not in keys)
    problems += [f"unexpected param {k!r} (not part of this config's layout)" for k in extra]
    if problems:
        raise CheckpointError("params do not match the ModelConfig layout:\n  " + "\n  ".join(problems))


def _plan_tensors(config: ModelConfig, specs: list[ParamSpec], params: dict[str, Any],
                  target: np.dtype) -> list[PlannedTensor]:
    planned = []
    for spec in specs:
        leaf = _get_path(params, spec.path)
        if spec.stacked:
            for i, name in enumerate(spec.hf_names(config.num_layers)):
                planned.append(PlannedTensor(name, spec.hf_shape, target,
                                             _producer(leaf, i, spec.transpose, target)))
        else:
            planned.append(PlannedTensor(spec.hf_pattern, spec.hf_shape, target,
                                         _producer(leaf, None, spec.transpose, target)))
    d = config.hidden_size
    for name in zero_o_proj_bias_names(config):  # Llama attention_bias=True also biases o_proj
        planned.append(PlannedTensor(name, (d,), target, lambda: np.zeros((d,), target)))
    return planned


def _producer(leaf: Any, layer: int | None, transpose: bool, target: np.dtype):
    def produce() -> np.ndarray:
        x = np.asarray(leaf if layer is None else leaf[layer])  # one layer reaches the host at a time
        x = x.T if transpose else x
        return np.ascontiguousarray(x.astype(target, copy=False))
    return produce


def _split_shards(planned: list[PlannedTensor], max_bytes: int) -> list[list[PlannedTensor]]:
    """Greedy, order-preserving packing; a single tensor larger than max_bytes gets its own shard."""
    shards: list[list[PlannedTensor]] = [[]]
    size = 0
    for t in planned:
        if shards[-1] and size + t.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


# ---------------------------------------------------------------------------------------- utils


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(d).__name__}")
    return d


def _write_json(path: str, obj: dict[str, Any]) -> str:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def _set_path(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def _get_path(tree: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def _flatten_keys(tree: Any, prefix: str = "") -> list[str]:
    if isinstance(tree, dict):
        out = []
        for k, v in tree.items():
            out += _flatten_keys(v, f"{prefix}{k}/" if isinstance(v, dict) else f"{prefix}{k}")
        return out
    return [prefix]
