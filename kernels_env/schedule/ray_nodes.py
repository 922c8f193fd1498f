"""Which Ray nodes get an evaluation host, and how each host actor is placed there.

A node offering the custom resource `leap_eval` (`ray start --resources='{"leap_eval": 1}'`) is an
evaluation machine; when no alive node offers it, every alive node with GPUs is one (cupy), or, for the
cpu backend, every alive node with CPUs. One host actor per such node, pinned to it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernels_env.core.config import BACKENDS

EVAL_RESOURCE = "leap_eval"


@dataclass(frozen=True)
class HostSpot:
    """An evaluation machine as Ray sees it."""
    node_id: str
    address: str
    gpus: int
    cpus: int


def eval_spots(nodes: list[dict[str, Any]], backend: str) -> tuple[str, list[HostSpot]]:
    """(backend, spots) from `ray.nodes()`: "auto" becomes "cupy" when a chosen node has GPUs, else "cpu"."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; expected 'auto', 'cupy' or 'cpu'")
    alive = [n for n in nodes if n.get("Alive")]

    def res(n: dict[str, Any], k: str) -> float:
        return float((n.get("Resources") or {}).get(k, 0))
    chosen = [n for n in alive if res(n, EVAL_RESOURCE) > 0]
    if not chosen:
        with_gpu = [n for n in alive if res(n, "GPU") > 0]
        chosen = with_gpu if backend == "cupy" or (backend == "auto" and with_gpu) else \
            [n for n in alive if res(n, "CPU") > 0]
    if backend == "auto":
        backend = "cupy" if any(res(n, "GPU") > 0 for n in chosen) else "cpu"
    spots = [HostSpot(str(n["NodeID"]), str(n.get("NodeManagerAddress", "?")), int(res(n, "GPU")),
                      int(res(n, "CPU"))) for n in chosen]
    return backend, spots


def actor_options(ray: Any, spot: HostSpot, backend: str, concurrency: int) -> dict[str, Any]:
    """Ray options of the host actor on `spot`: pinned to its node (hard affinity: a host never moves,
    its node's loss is its death), all of the node's GPUs for cupy (Ray sets CUDA_VISIBLE_DEVICES, the
    local pool puts exec workers on them), no CPU reserved (the local pool's workers use the node's CPUs;
    the actor only waits). Restarted after a crash, but a failed call is never retried by Ray: the driver
    decides (a job that kills its host must not be replayed forever)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return {"num_cpus": 0, "num_gpus": spot.gpus if backend == "cupy" else 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=spot.node_id, soft=False),
            "max_restarts": -1, "max_task_retries": 0, "max_concurrency": concurrency}
