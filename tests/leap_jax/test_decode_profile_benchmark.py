"""benchmarks/decode_profile.py sorts a decode step's device kernels into families (gemm, attention,
reduce, ...) per step; the generated family's shape is the SFT policy's."""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import decode_profile  # noqa: E402


def test_kernel_families_by_name():
    f = decode_profile.family
    assert f("gemm_fusion_dot_81") == f("sm90_xmma_gemm_bf16") == "gemm"
    assert f("cudnn_generated_fort_native_sdpa_sm90") == "attention (cuDNN)"
    assert f("input_reduce_fusion_1") == "reduce"
    assert f("wrapped_convert_22") == f("wrapped_slice_129") == "convert / copy / slice"
    assert f("loop_dynamic_update_slice_fusion") == "dynamic-update-slice"  # not taken by "slice"
    assert f("loop_multiply_fusion") == "elementwise / loop fusion"
    assert f("threefry2x32") == "rng / sort"
    assert f("memset32") == "other"


def test_families_sum_device_kernels_per_step_costliest_first():
    by_kernel = {("/device:GPU:0 stream 7", "gemm_fusion_dot_1"): 300.0,
                 ("/device:GPU:0 stream 7", "gemm_fusion_dot_2"): 100.0,
                 ("/device:GPU:0 stream 7", "loop_add_fusion"): 50.0,
                 ("/host:CPU", "gemm_fusion_dot_1"): 999.0}  # a host event of the same name is not a kernel
    count = {k: 4 for k in by_kernel}
    rows = decode_profile.families(by_kernel, count, steps=2)
    assert rows == [("gemm", 200.0, 4.0), ("elementwise / loop fusion", 25.0, 2.0)]


def test_device_busy_counts_overlapping_kernels_once(tmp_path):
    """The GPU's busy time is the union of its kernels' spans over every stream; host events and
    gaps do not count (a Perfetto trace written as jax.profiler writes it)."""
    import gzip
    assert decode_profile.union_us([]) == 0.0
    assert decode_profile.union_us([(0.0, 10.0), (5.0, 10.0), (30.0, 5.0), (31.0, 1.0)]) == 20.0
    meta = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}}
            for p, n in ((1, "/device:GPU:0 stream 7"), (2, "/device:GPU:0 stream 9"), (3, "/host:CPU"))]
    spans = [{"ph": "X", "pid": 1, "name": "gemm_fusion_dot_1", "ts": 100.0, "dur": 40.0},
             {"ph": "X", "pid": 2, "name": "loop_add_fusion", "ts": 120.0, "dur": 40.0},  # overlaps 20
             {"ph": "X", "pid": 1, "name": "loop_add_fusion", "ts": 300.0, "dur": 10.0},
             {"ph": "X", "pid": 3, "name": "PjitFunction", "ts": 0.0, "dur": 1000.0}]  # host
    d = tmp_path / "plugins" / "profile" / "run"
    d.mkdir(parents=True)
    with gzip.open(d / "perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": meta + spans}, f)
    prof = decode_profile.read_perfetto(str(tmp_path))
    assert prof["device_busy_us"] == 70.0
    assert prof["busy"]["/device:GPU:0 stream 7"] == 50.0 and prof["busy"]["/host:CPU"] == 1000.0


def test_the_generated_shape_is_the_sft_policys():
    """SHAPES["generated"] against the config.json inside the committed policy tarball."""
    import tarfile
    with tarfile.open(os.path.join(ROOT, "artifacts", "policies", "gen-2026-12-04", "policy.tar.gz")) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("config.json") and "tokenizer" not in m.name)
        hf = json.load(tar.extractfile(member))
    shape = decode_profile.SHAPES["generated"]
    assert (shape["vocab_size"], shape["hidden_size"], shape["intermediate_size"], shape["num_layers"],
            shape["num_heads"], shape["num_kv_heads"], shape["rope_theta"], shape["tie_word_embeddings"]) == (
        hf["vocab_size"], hf["hidden_size"], hf["intermediate_size"], hf["num_hidden_layers"],
        hf["num_attention_heads"], hf["num_key_value_heads"], hf["rope_theta"], hf["tie_word_embeddings"])
