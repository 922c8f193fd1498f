"""Cache keys (cosmetic edits hit, code edits miss) and ResultCache (LRU, disk, no env_error)."""
from __future__ import annotations

from kernels_env.execute.result_cache import ResultCache, cache_key, normalize_source
from kernels_env.core.config import EnvConfig
from kernels_env.core.result import Result
from kernels_env.core.status import Status

CUDA = 'extern "C" __global__ void k(float* y, int n) {\n    int i = threadIdx.x;  // index\n    if (i < n) y[i] = 1.0f;\n}'
LAUNCH = "k<<<1, 256>>>(y, N);"


def sub(cuda: str = CUDA, launch: str = LAUNCH, prose: str = "") -> str:
    return f"{prose}\n```cuda\n{cuda}\n```\n```launch\n{launch}\n```\n"


def test_cosmetic_changes_hit():
    base = cache_key("t", sub(), EnvConfig())
    variants = [
        sub(prose="Different reasoning text before the code."),
        sub(CUDA.replace("// index", "/* the thread */")),
        sub(CUDA.replace("    ", "\t") + "   \n\n"),
        sub(CUDA.replace("int i = threadIdx.x;", "int   i   =   threadIdx.x;")),
        sub(launch="// one block\nk<<<1, 256>>>(y, N);   "),
    ]
    assert all(cache_key("t", v, EnvConfig()) == base for v in variants)


def test_code_task_or_config_changes_miss():
    base = cache_key("t", sub(), EnvConfig())
    assert cache_key("t", sub(CUDA.replace("1.0f", "2.0f")), EnvConfig()) != base
    assert cache_key("t", sub(launch="k<<<2, 256>>>(y, N);"), EnvConfig()) != base
    assert cache_key("t", sub(CUDA.replace('"', "'")), EnvConfig()) != base
    assert cache_key("u", sub(), EnvConfig()) != base
    assert cache_key("t", sub(), EnvConfig(correctness_trials=7)) != base
    assert cache_key("t", "no blocks", EnvConfig()) != cache_key("t", "no blocks!", EnvConfig())


def test_normalize_keeps_strings_and_lines():
    assert normalize_source('a  "x // not a comment"  b // c\n\n#define X 1') == 'a "x // not a comment" b\n#define X 1'


def test_lru_and_hit_marks_cached(tmp_path):
    c = ResultCache(max_entries=2)
    r = Result(Status.CORRECT, message="m", task="t")
    keys = [cache_key("t", sub(launch=f"k<<<{i}, 1>>>(y, N);"), EnvConfig()) for i in range(1, 4)]
    for k in keys:
        assert c.put(k, r)
    assert keys[0] not in c and len(c) == 2
    hit = c.get(keys[2])
    assert hit.cached and hit.message == "m" and not r.cached
    assert c.get(keys[0]) is None and (c.hits, c.misses) == (1, 1)


def test_env_error_never_cached(tmp_path):
    c = ResultCache(directory=str(tmp_path))
    k = cache_key("t", sub(), EnvConfig())
    assert not c.put(k, Result.env_error("boom"))
    assert c.get(k) is None and not any(tmp_path.rglob("*.json"))


def test_disk_roundtrip(tmp_path):
    k = cache_key("t", sub(), EnvConfig())
    r = Result(Status.WRONG_OUTPUT, message="bad", task="t", stage_seconds={"parse": 0.1})
    ResultCache(directory=str(tmp_path)).put(k, r)
    again = ResultCache(directory=str(tmp_path)).get(k)  # a fresh process would see the same
    assert again.status is Status.WRONG_OUTPUT and again.stage_seconds == {"parse": 0.1} and again.cached
