"""EvalPool(mode="ray") on a local Ray cluster (CPU only): host actors with the cpu backend give the
statuses process mode gives, in order; the driver de-duplicates; a host busy longer than the heartbeat
timeout is not hung; a host SIGKILLed, stopped (found by its missed pings) or whose node is removed
mid-batch loses no job; a job that always kills its host ends as env_error after the bounded resends;
with every host gone, jobs end as env_error without a hang; a driver without CuPy drives remote
evaluation. One Ray cluster serves the whole module (skipped without Ray)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from kernels_env.core.config import EnvConfig, StageLimits  # noqa: E402
from kernels_env.schedule.pool import EvalPool, Job  # noqa: E402
from kernels_env.schedule.ray_nodes import EVAL_RESOURCE, eval_spots  # noqa: E402
from kernels_env.core.status import Status  # noqa: E402
from kernels_env.tasks import get_task  # noqa: E402
from kernels_env.testing.evaluators import scripted_evaluator  # noqa: E402

pytestmark = pytest.mark.timeout(300)
SCRIPTED = EnvConfig(backend="cpu", limits=StageLimits(parse=1, compile=1, correctness=1, timing=1))
SLOW = EnvConfig(backend="cpu", limits=StageLimits(parse=1, compile=1, correctness=20, timing=1))
HEARTBEAT_S = 3.0
REAL = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=2,
                 limits=StageLimits(parse=2, compile=20, correctness=5, timing=2))


@pytest.fixture(scope="module")
def cluster():
    """A head node with 2 CPUs (hosts of plain pools land there); tests add tagged nodes as needed."""
    from ray.cluster_utils import Cluster
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    ray.init(address=c.address)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def two_nodes(cluster):
    """Two more logical nodes offering `leap_eval`: every host of a pool made now lands on them."""
    nodes = [cluster.add_node(num_cpus=1, resources={EVAL_RESOURCE: 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    yield nodes
    for n in nodes:
        if n in cluster.worker_nodes:
            cluster.remove_node(n)


def scripted_pool(**kw):
    args = {"backend": "cpu", "config": SCRIPTED, "evaluator": scripted_evaluator, "cpu_workers": 1,
            "unavailable_timeout_s": 20, "batch_jobs": 2, **kw}
    return EvalPool(mode="ray", **args)


def wait_hosts_up(pool, n, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        up = [h for h in pool.host_info() if h["state"] == "up"]
        if len(up) >= n:
            return up
        time.sleep(0.2)
    raise AssertionError(f"hosts not up within {timeout} s: {pool.host_info()}")


def real_jobs():
    relu = get_task("relu")
    wrong = relu.solution.replace("fmaxf(v, 0.0f)", "fmaxf(v, 1.0f)")
    broken = relu.solution.replace("float r = fmaxf(v, 0.0f);", "float r = nope;")
    crash = ('```cuda\nextern "C" __global__ void bad(float* y) { y[1ll << 36] = 1.f; }\n```\n'
             "```launch\nbad<<<1, 1>>>(y);\n```")
    sig = get_task("sigmoid")
    return [Job("relu", relu.solution, REAL), Job("relu", wrong, REAL), Job("relu", broken, REAL),
            Job("relu", crash, REAL), Job("sigmoid", sig.solution, REAL)]


def test_same_statuses_in_order_as_process_mode(cluster):
    jobs = real_jobs()
    with EvalPool(mode="process", backend="cpu", config=REAL, compile_workers=1, cpu_workers=1) as p:
        want = [r.status for r in p.map(jobs)]
    assert want == [Status.CORRECT, Status.WRONG_OUTPUT, Status.COMPILE_ERROR, Status.RUNTIME_ERROR,
                    Status.CORRECT]
    with EvalPool(mode="ray", backend="cpu", config=REAL, compile_workers=1, cpu_workers=1) as p:
        pid = wait_hosts_up(p, 1)[0]["pid"]
        got = p.map(jobs)
        assert [r.status for r in got] == want, [r.message for r in got]
        assert [r.task for r in got] == [j.task for j in jobs]
        after = p.host_info()[0]
        assert after["state"] == "up" and after["pid"] == pid  # the crash cost a worker, not the host
        assert p.map(jobs[:1])[0].cached  # the driver's cache


def test_duplicates_leave_the_driver_once(cluster):
    with scripted_pool() as p:
        futs = [p.submit(Job("t", "sleep:0.5 same")) for _ in range(4)]
        rs = [f.result(timeout=60) for f in futs]
        again = p.submit(Job("t", "sleep:0.5 same")).result(timeout=60)
        poison = p.submit(Job("t", "exit")).result(timeout=60)  # kills one exec worker on the host
        s = p.stats()
    assert all(r.status is Status.CORRECT for r in rs) and again.cached
    assert s["evaluations"] == 2 and s["batches"] == 2 and s["cache_hits"] == 1 and s["submitted"] == 6
    assert poison.status is Status.RUNTIME_ERROR and s["host_deaths"] == 0 and s["crashes"] >= 1


def _run_then(pool, jobs, action, after_s=1.0):
    """map(jobs) while `action()` runs after_s seconds in."""
    t = threading.Timer(after_s, action)
    t.start()
    try:
        return pool.map(jobs)
    finally:
        t.cancel()


def _time_to_hang(pool, pid, jobs):
    """SIGSTOP host `pid` while `jobs` run: (seconds until the pool counts a hang, slowest stats() call
    meanwhile, the results)."""
    futs = [pool.submit(j) for j in jobs]
    time.sleep(1.0)
    os.kill(pid, signal.SIGSTOP)
    t0, slowest = time.monotonic(), 0.0
    while time.monotonic() - t0 < 120:
        t = time.monotonic()
        hangs = pool.stats()["host_hangs"]
        slowest = max(slowest, time.monotonic() - t)
        if hangs:
            break
        time.sleep(0.1)
    return time.monotonic() - t0, slowest, [f.result(timeout=120) for f in futs]


def test_host_killed_hung_or_node_removed_mid_batch_loses_nothing(cluster, two_nodes):
    with scripted_pool(heartbeat_timeout_s=HEARTBEAT_S) as p:
        hosts = wait_hosts_up(p, 2)
        slow = p.submit(Job("t", f"sleep:{HEARTBEAT_S + 2} slow", SLOW)).result(timeout=60)
        s = p.stats()
        assert slow.status is Status.CORRECT and s["host_hangs"] == 0 and s["host_deaths"] == 0, (slow, s)

        jobs = [Job("t", f"sleep:0.4 job{i}") for i in range(10)]
        rs = _run_then(p, jobs, lambda: os.kill(hosts[0]["pid"], signal.SIGKILL))
        assert [r.message for r in rs] == [j.text for j in jobs]
        assert all(r.status is Status.CORRECT for r in rs)
        s = p.stats()
        assert s["host_deaths"] == 1 and s["resends"] >= 1, s

        hosts = wait_hosts_up(p, 2)  # the killed actor restarted on its node
        jobs = [Job("t", f"sleep:0.4 hung{i}") for i in range(10)]
        took, slowest_stats, rs = _time_to_hang(p, hosts[1]["pid"], jobs)
        print(f"\nstopped host counted hung after {took:.1f} s (heartbeat_timeout_s={HEARTBEAT_S:g}); "
              f"slowest stats() meanwhile {slowest_stats:.3f} s")
        assert took < HEARTBEAT_S + 15 and slowest_stats < 2, (took, slowest_stats)
        assert [r.message for r in rs] == [j.text for j in jobs]
        s = p.stats()
        assert s["host_hangs"] == 1 and s["host_deaths"] == 2, s

        wait_hosts_up(p, 2)
        node = two_nodes[0]
        jobs = [Job("t", f"sleep:0.4 gone{i}") for i in range(10)]
        rs = _run_then(p, jobs, lambda: cluster.remove_node(node))
        assert [r.message for r in rs] == [j.text for j in jobs]
        s = p.stats()
        assert s["host_deaths"] == 3 and s["hosts_up"] == 1, s


def test_job_that_always_kills_its_host_ends_as_env_error(cluster, two_nodes):
    with scripted_pool(host_retries=1) as p:
        wait_hosts_up(p, 2)
        rs = p.map([Job("t", "killhost"), Job("t", "ok")])
        s = p.stats()
    assert rs[0].status is Status.ENV_ERROR and "gave up after host_retries=1" in rs[0].message
    assert rs[1].status is Status.CORRECT
    assert s["host_deaths"] == 2 and s["resends"] >= 1, s


def test_every_host_gone_is_env_error_without_a_hang(cluster, two_nodes):
    jobs = [Job("t", f"sleep:0.5 all{i}") for i in range(6)]
    with scripted_pool(unavailable_timeout_s=5, restart_timeout_s=30) as p:
        wait_hosts_up(p, 2)
        t0 = time.monotonic()
        rs = _run_then(p, jobs, lambda: [cluster.remove_node(n) for n in two_nodes], after_s=0.5)
        assert time.monotonic() - t0 < 120
        late = p.submit(Job("t", "after")).result(timeout=60)
    statuses = {r.status for r in rs}
    assert statuses <= {Status.CORRECT, Status.ENV_ERROR} and Status.ENV_ERROR in statuses
    assert any("no evaluation host has been up" in r.message for r in rs + [late])
    assert late.status is Status.ENV_ERROR


def test_driver_without_cupy_scores_on_hosts(cluster):
    """The driver process cannot import CuPy; the host compiles and runs the kernel (cpu backend)."""
    code = ("import sys\n"
            "sys.modules['cupy'] = None\n"
            "from kernels_env.core.config import EnvConfig\n"
            "from kernels_env.schedule.pool import EvalPool, Job\n"
            "from kernels_env.tasks import get_task\n"
            "if __name__ == '__main__':\n"
            "    cfg = EnvConfig(backend='cpu', sizes='small', timing=False, correctness_trials=1)\n"
            f"    with EvalPool(mode='ray', address={cluster.address!r}, backend='cpu', config=cfg,\n"
            "                  compile_workers=1, cpu_workers=1) as p:\n"
            "        r = p.map([Job('relu', get_task('relu').solution, cfg)])[0]\n"
            "    assert r.correct, r.message\n"
            "    try:\n"
            "        import cupy  # noqa\n"
            "        print('cupy importable')\n"
            "    except ImportError:\n"
            "        print('OK')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]


def test_node_choice_and_bad_arguments():
    gpu = {"Alive": True, "NodeID": "g", "Resources": {"CPU": 16, "GPU": 8}}
    cpu = {"Alive": True, "NodeID": "c", "Resources": {"CPU": 4}}
    tagged = {"Alive": True, "NodeID": "t", "Resources": {"CPU": 4, EVAL_RESOURCE: 1}}
    dead = {"Alive": False, "NodeID": "d", "Resources": {"CPU": 4, "GPU": 8}}
    assert [(s.node_id, s.gpus) for s in eval_spots([gpu, cpu, dead], "auto")[1]] == [("g", 8)]
    assert eval_spots([gpu, cpu], "auto")[0] == "cupy" and eval_spots([cpu], "auto")[0] == "cpu"
    assert [s.node_id for s in eval_spots([gpu, cpu, tagged], "cpu")[1]] == ["t"]
    assert [s.node_id for s in eval_spots([gpu, cpu], "cpu")[1]] == ["g", "c"]
    assert eval_spots([cpu], "cupy")[1] == []
    for kw, msg in (({"batch_jobs": 0}, "batch_jobs=0"), ({"host_retries": -1}, "host_retries=-1"),
                    ({"unavailable_timeout_s": 0}, "unavailable_timeout_s=0"),
                    ({"heartbeat_timeout_s": 0.5}, "heartbeat_timeout_s=0.5; expected seconds >= 1")):
        with pytest.raises(ValueError, match=msg):
            EvalPool(mode="ray", **kw)


def test_missing_ray_names_the_extra(monkeypatch):
    from kernels_env.schedule import ray_support
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install \"\.\[dist\]\""):
        ray_support.require_ray()


def test_cli_scores_on_the_cluster(cluster, capsys):
    from kernels_env.cli import main
    args = ["check-suite", "--tasks", "relu", "sigmoid", "--backend", "cpu", "--sizes", "small", "--no-timing",
            "--trials", "1"]
    assert main([*args, "--ray-address", cluster.address]) == 0
    assert "2/2 correct" in capsys.readouterr().out
    assert main([*args, "--inline", "--ray-address", cluster.address]) == 2
    assert "exclude each other" in capsys.readouterr().err
