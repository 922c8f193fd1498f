"""RayEvalPool: `EvalPool(mode="ray")`, the pool's contract (`submit`, `map` in order, `stats`, `close`;
every future resolves to a Result) with jobs scored on evaluation hosts of a Ray cluster.

The driver (this process, e.g. the trainer) keeps the result cache and the in-flight de-duplication of
every pool (pool_base.PoolBase), so a job already scored or being scored never leaves it. A dispatcher
thread packs queued jobs into batches (`batch_jobs`) and sends each to the host with the most free room;
a host takes at most `inflight_per_gpu` batches per GPU at once (the backpressure window). Each host is
one actor per machine (ray_host.EvalHost) running a process-mode pool there, so compile workers, exec
workers, their limits and restarts are the local pool's business; kernel crashes and timeouts come
back as results.

Failures of a host, never of a job, are the driver's: a host lost mid-batch (actor or node died, or the
driver found it hung and killed it) is counted once (`host_deaths`), its batches' jobs go back to the
front of the queue for other hosts (`resends`), at most `host_retries` times per job, then the job is
`env_error`. Ray restarts a lost actor where its node still exists; the driver pings it and uses it
again once it answers. With no host up for `unavailable_timeout_s`, every queued job resolves to
`env_error` instead of waiting. Ray never retries a call itself (max_task_retries=0).

Hang detection is a heartbeat: the driver pings every up host every `heartbeat_timeout_s / 3` (at most
every 5 s); the actor answers in a thread of its own while batches run, so a host busy with long
compiles or jobs keeps answering. A host that answers nothing (not a ping, not a batch) for
`heartbeat_timeout_s` is hung (`host_hangs`): the driver kills it and Ray restarts it. A batch that
outlives a generous hard ceiling (`batch_timeout_s`, else every job its host holds at its stage limits
twice over plus `job_slack_s`) counts as a hang too, for a host alive but stuck. The replies (pings
and batches) carry the host's local counters, which `stats()` sums without calling the hosts.
"""
from __future__ import annotations

import collections
import logging
import math
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from kernels_env.execute.result_cache import ResultCache
from kernels_env.core.config import BACKENDS, RAY_MIN_HEARTBEAT_S, EnvConfig
from kernels_env.schedule.pool_base import RESTART_SPANS, Evaluator, Job, Pending, PoolBase
from kernels_env.core.result import Result
from kernels_env.schedule.ray_host import HEALTH_GROUP, host_actor_class
from kernels_env.schedule.ray_nodes import HostSpot, actor_options, eval_spots
from kernels_env.schedule.ray_support import host_lost, require_ray

log = logging.getLogger(__name__)
TICK_S = 0.1  # the dispatcher's longest wait for a reply before it looks at the queue again
PING_EVERY_MAX_S = 5.0  # the longest gap between pings of an up host (stats() freshness)


@dataclass
class _Host:
    """The driver's view of one host actor."""
    spot: HostSpot
    handle: Any
    slots: int  # batches it may hold at once
    state: str = "down"  # up | down (starting or lost: pinged until it answers) | dead
    epoch: int = 0  # +1 at each loss, so a loss reported by several batches counts once
    since: float = field(default_factory=time.monotonic)  # when it went down
    seen: float = field(default_factory=time.monotonic)  # its last answer (ping or batch)
    pinged: float = 0.0  # when the last ping was sent
    batches: int = 0  # in flight now
    jobs: int = 0
    info: dict[str, Any] = field(default_factory=dict)  # its latest info() (pid, hostname, workers)
    local: dict[str, int] = field(default_factory=dict)  # its local pool's latest counters
    ping: Any = None  # the pending ping's ObjectRef (one at a time)


@dataclass
class _Batch:
    host: _Host
    epoch: int
    pends: list[Pending]
    deadline: float  # monotonic time past which the batch's host counts as hung
    ceiling: float  # seconds it was given


def combined_spans(local: list[dict[str, Any]]) -> dict[str, int]:
    """The hosts' background restart costs (RESTART_SPANS) as one pool's: counts summed, means
    weighted by them, the largest max."""
    out: dict[str, int] = {}
    for span in RESTART_SPANS:
        counts = [int(s.get(f"{span}_count", 0)) for s in local]
        weighted = sum(c * s.get(f"{span}_ms_mean", 0) for c, s in zip(counts, local, strict=True))
        n = sum(counts)
        out[f"{span}_count"] = n
        out[f"{span}_ms_mean"] = round(weighted / n) if n else 0
        out[f"{span}_ms_max"] = max((int(s.get(f"{span}_ms_max", 0)) for s in local), default=0)
    return out


class RayEvalPool(PoolBase):
    """EvalPool(mode="ray"): see the module docstring. The process-pool arguments (backend, compile_workers,
    cpu_workers, exec_workers_per_gpu, spare_worker, worker_env, evaluator, gpu_workers) configure each
    host's local pool; gpu_workers defaults to the host node's GPU count."""

    def __init__(self, mode: str = "ray", backend: str = "auto", gpu_workers: int | None = None,
                 compile_workers: int | None = None, cache: bool | ResultCache = True,
                 config: EnvConfig | None = None, evaluator: Evaluator | None = None,
                 cpu_workers: int | None = None, worker_env: dict[str, str] | None = None,
                 exec_workers_per_gpu: int | None = None, spare_worker: bool | int | None = None, *,
                 address: str | None = None, hosts: int | None = None, batch_jobs: int = 8,
                 inflight_per_gpu: int = 2, host_retries: int = 2, job_slack_s: float = 60.0,
                 batch_timeout_s: float | None = None, unavailable_timeout_s: float = 120.0,
                 restart_timeout_s: float = 300.0, discover_interval_s: float = 30.0,
                 heartbeat_timeout_s: float = 30.0,
                 ray_init_kwargs: dict[str, Any] | None = None) -> None:
        if mode != "ray":
            raise ValueError(f"RayEvalPool mode={mode!r}; expected 'ray' (EvalPool(mode=...) picks the class)")
        for nm, v in (("batch_jobs", batch_jobs), ("inflight_per_gpu", inflight_per_gpu), ("hosts", hosts)):
            if v is not None and v < 1:
                raise ValueError(f"EvalPool(mode='ray') {nm}={v}; expected an integer >= 1")
        if host_retries < 0:
            raise ValueError(f"EvalPool(mode='ray') host_retries={host_retries}; expected >= 0")
        for nm, s in (("job_slack_s", job_slack_s), ("unavailable_timeout_s", unavailable_timeout_s),
                      ("restart_timeout_s", restart_timeout_s), ("batch_timeout_s", batch_timeout_s)):
            if s is not None and not s > 0:
                raise ValueError(f"EvalPool(mode='ray') {nm}={s}; expected seconds > 0")
        if not heartbeat_timeout_s >= RAY_MIN_HEARTBEAT_S:
            raise ValueError(f"EvalPool(mode='ray') heartbeat_timeout_s={heartbeat_timeout_s}; expected seconds "
                             f">= {RAY_MIN_HEARTBEAT_S:g} (a host silent that long counts as hung; shorter would kill busy hosts)")
        if backend not in BACKENDS:
            raise ValueError(f"EvalPool backend={backend!r}; expected 'auto', 'cupy' or 'cpu'")
        self._ray = require_ray()
        super().__init__(mode, config or EnvConfig(backend=backend), cache, evaluator,
                         ("batches", "host_deaths", "host_hangs", "resends"))
        self.batch_jobs, self.inflight_per_gpu, self.host_retries = batch_jobs, inflight_per_gpu, host_retries
        self.job_slack_s, self.batch_timeout_s = job_slack_s, batch_timeout_s
        self.unavailable_timeout_s, self.restart_timeout_s = unavailable_timeout_s, restart_timeout_s
        self.discover_interval_s, self.max_hosts = discover_interval_s, hosts
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._ping_every = min(PING_EVERY_MAX_S, heartbeat_timeout_s / 3)
        self._host_kwargs = {k: v for k, v in (
            ("gpu_workers", gpu_workers), ("compile_workers", compile_workers), ("config", self.config),
            ("evaluator", evaluator), ("cpu_workers", cpu_workers), ("worker_env", worker_env),
            ("exec_workers_per_gpu", exec_workers_per_gpu), ("spare_worker", spare_worker)) if v is not None}
        self._queue: collections.deque[Pending] = collections.deque()
        self._wake = threading.Event()
        self._batches: dict[Any, _Batch] = {}  # ObjectRef of score_batch -> its batch
        self._pings: dict[Any, _Host] = {}
        self._resends: dict[str, int] = {}  # job key -> times resent after a host loss
        self._hosts: dict[str, _Host] = {}  # node id -> host
        self._no_host_since: float | None = None
        self._owns_ray = not self._ray.is_initialized()
        if self._owns_ray:
            kw = dict(ray_init_kwargs or {})
            if address is None:
                kw.setdefault("include_dashboard", False)
            self._ray.init(address=address, **kw)
        self._actor_cls = host_actor_class(self._ray)
        self._requested_backend = backend
        self.backend = backend
        self._discover()
        if not self._hosts:
            self._closed = True
            self._shutdown_ray()
            raise RuntimeError(self._no_spots_message())
        self._next_discover = time.monotonic() + discover_interval_s
        self._thread = threading.Thread(target=self._run, name="EvalPool-ray-dispatch", daemon=True)
        self._thread.start()

    # -- hosts --
    def _no_spots_message(self) -> str:
        nodes = [(n.get("NodeManagerAddress"), n.get("Resources")) for n in self._ray.nodes() if n.get("Alive")]
        return (f"EvalPool(mode='ray', backend={self._requested_backend!r}): no alive Ray node can host evaluation "
                "(none offers the resource 'leap_eval', none has GPUs"
                + (", none has CPUs" if self._requested_backend != "cupy" else "")
                + f"); alive nodes and their resources: {nodes}. Start GPU hosts with `ray start --address=HEAD:6379 "
                "--resources='{\"leap_eval\": 1}'` (docs/DISTRIBUTED_EVAL.md)")

    def _discover(self) -> None:
        """Start a host on every evaluation node that has none (at start, then every discover_interval_s)."""
        backend, spots = eval_spots(self._ray.nodes(), self._requested_backend)
        if self.backend == "auto":
            self.backend = backend
        for spot in spots:
            if self.max_hosts is not None and sum(h.state != "dead" for h in self._hosts.values()) >= self.max_hosts:
                break
            old = self._hosts.get(spot.node_id)
            if old is not None and old.state != "dead":
                continue
            kwargs = dict(self._host_kwargs, backend=self.backend)
            if self.backend == "cupy":
                kwargs.setdefault("gpu_workers", max(1, spot.gpus))
            slots = self.inflight_per_gpu * (max(1, spot.gpus) if self.backend == "cupy" else 1)
            handle = self._actor_cls.options(**actor_options(self._ray, spot, self.backend, slots + 4)).remote(kwargs)
            self._hosts[spot.node_id] = _Host(spot, handle, slots)

    def _lose(self, host: _Host, epoch: int, why: str) -> None:
        """Record the loss of `host` (once per epoch); it is pinged until it answers again. A ping sent
        before the loss is dropped: its answer (or failure) tells nothing about the restarted actor."""
        if host.state == "dead" or epoch != host.epoch:
            return
        host.epoch += 1
        host.state, host.since = "down", time.monotonic()
        self._drop_ping(host)
        self._count("host_deaths")
        log.warning("evaluation host on %s lost (%s); its jobs go to other hosts", host.spot.address, why)

    def _hang(self, host: _Host, why: str) -> None:
        """`host` answers nothing, or a batch outlived its ceiling: count a hang, kill it (Ray restarts
        it), and let its batches fail over to other hosts."""
        self._count("host_hangs")
        self._lose(host, host.epoch, f"{why}; the host is restarted")
        try:
            self._ray.kill(host.handle, no_restart=False)
        except Exception:
            pass

    def _declare_dead(self, host: _Host, why: str) -> None:
        host.state = "dead"
        log.warning("evaluation host on %s given up (%s)", host.spot.address, why)
        try:
            self._ray.kill(host.handle, no_restart=True)
        except Exception:
            pass

    def _tend_hosts(self, now: float) -> None:
        """Give up on a host down past restart_timeout_s, kill one silent past heartbeat_timeout_s, and
        ping the others (a down host as soon as its last ping is answered, an up one every _ping_every)."""
        for host in self._hosts.values():
            if host.state == "down" and now - host.since > self.restart_timeout_s:
                self._declare_dead(host, f"no answer within restart_timeout_s={self.restart_timeout_s:g} s")
            elif host.state == "up" and self._silent(host, now):
                self._hang(host, f"no answer to pings for {now - host.seen:.0f} s "
                                 f"(heartbeat_timeout_s={self.heartbeat_timeout_s:g})")
            elif host.state != "dead" and host.ping is None and (
                    host.state == "down" or now - host.pinged >= self._ping_every):
                host.ping, host.pinged = host.handle.ping.options(concurrency_group=HEALTH_GROUP).remote(), now
                self._pings[host.ping] = host

    def _silent(self, host: _Host, now: float) -> bool:
        """True when `host` has answered nothing for heartbeat_timeout_s and its pending ping is not
        answered either (an answer the dispatcher has not read yet is a sign of life)."""
        if now - host.seen <= self.heartbeat_timeout_s:
            return False
        return host.ping is None or not self._ray.wait([host.ping], timeout=0)[0]

    def _drop_ping(self, host: _Host) -> None:
        if host.ping is not None:
            self._pings.pop(host.ping, None)
            host.ping = None

    def _pinged(self, ref: Any) -> None:
        """A ping's answer: the host is up (again), its info and counters refreshed. A failure of an up
        host's ping that means the actor is gone loses the host; for a down host it means Ray cannot
        restart it (its node is gone). Other failures: the next ping, or the heartbeat, decides."""
        host = self._pings.pop(ref)
        host.ping = None
        try:
            reply = self._ray.get(ref)
        except self._ray.exceptions.ActorDiedError as e:
            first = str(e).splitlines()[0][:200]
            if host.state == "up":
                self._lose(host, host.epoch, f"the actor died: {first}")
            else:
                self._declare_dead(host, f"the actor cannot restart: {first}")
            return
        except Exception:
            return
        host.seen, host.info, host.local = time.monotonic(), reply["info"], reply["stats"]
        if host.state == "down":
            host.state = "up"

    # -- jobs --
    def _enqueue(self, pend: Pending) -> None:
        with self._lock:
            self._queue.append(pend)
        self._wake.set()

    def _done(self, pend: Pending, result: Result) -> None:
        self._resends.pop(pend.key, None)
        self._complete(pend, result)

    def _resend(self, pend: Pending, why: str) -> None:
        """Back to the front of the queue after a host loss, or env_error after host_retries resends."""
        n = self._resends.get(pend.key, 0) + 1
        if n > self.host_retries:
            self._done(pend, Result.env_error(
                f"the evaluation host was lost {n} times while scoring this job (last: {why}); gave up after "
                f"host_retries={self.host_retries} resends", task=pend.job.task))
            return
        self._resends[pend.key] = n
        self._count("resends")
        with self._lock:
            self._queue.appendleft(pend)

    def _deadline(self, host: _Host, pends: list[Pending]) -> float:
        """The hard ceiling on one batch (its host counts as hung past it, even while answering pings):
        batch_timeout_s, else every job the host holds run `exec_workers` at a time, each at its stage
        limits twice over (the local pool retries a crashed job once), plus job_slack_s."""
        if self.batch_timeout_s is not None:
            return self.batch_timeout_s
        per_job = 2 * max(p.config.limits.job_s(parse=True) for p in pends)
        rounds = math.ceil(host.jobs / max(1, int(host.info.get("exec_workers") or 1)))
        return self.job_slack_s + per_job * rounds

    def _send(self) -> None:
        """Pack queued jobs into batches for hosts with free slots, spreading a short queue over them."""
        while True:
            free = [h for h in self._hosts.values() if h.state == "up" and h.batches < h.slots]
            with self._lock:
                queued = len(self._queue)
            if not free or not queued:
                return
            host = max(free, key=lambda h: h.slots - h.batches)
            size = min(self.batch_jobs, math.ceil(queued / sum(h.slots - h.batches for h in free)))
            with self._lock:
                pends = [self._queue.popleft() for _ in range(min(size, len(self._queue)))]
            jobs = [Job(p.job.task, p.job.text, p.config) for p in pends]
            host.batches += 1
            host.jobs += len(pends)
            ref = host.handle.score_batch.remote(jobs)
            ceiling = self._deadline(host, pends)
            self._batches[ref] = _Batch(host, host.epoch, pends, time.monotonic() + ceiling, ceiling)
            self._count("batches")

    def _collect(self, ref: Any, batch: _Batch) -> None:
        host = batch.host
        host.batches -= 1
        host.jobs -= len(batch.pends)
        try:
            reply = self._ray.get(ref)
        except Exception as e:
            if host_lost(e):
                why = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
                self._lose(host, batch.epoch, why)
                for p in batch.pends:
                    self._resend(p, why)
            else:
                for p in batch.pends:
                    self._done(p, Result.env_error("the evaluation host failed on this batch", task=p.job.task,
                                                   details=str(e)[-6000:]))
            return
        if batch.epoch == host.epoch:
            host.seen, host.local = time.monotonic(), reply["stats"]
        for p, d in zip(batch.pends, reply["results"], strict=True):
            self._done(p, Result.from_dict(d))

    def _kill_stuck_hosts(self, now: float) -> None:
        """Count as hung, and restart, the host of any batch past its hard ceiling (_deadline), even one
        that answers pings."""
        for batch in list(self._batches.values()):
            host = batch.host
            if now > batch.deadline and batch.epoch == host.epoch and host.state == "up":
                self._hang(host, f"a batch ran past its ceiling of {batch.ceiling:.0f} s")

    def _fail_queue_without_hosts(self, now: float) -> None:
        if any(h.state == "up" for h in self._hosts.values()):
            self._no_host_since = None
            return
        if self._no_host_since is None:
            self._no_host_since = now
        if now - self._no_host_since < self.unavailable_timeout_s:
            return
        with self._lock:
            left = list(self._queue)
            self._queue.clear()
        for p in left:
            self._done(p, Result.env_error(f"no evaluation host has been up for {self.unavailable_timeout_s:g} s "
                                           f"({len(self._hosts)} known, {self._resends.get(p.key, 0)} resends of "
                                           "this job); check the Ray cluster's GPU hosts", task=p.job.task))

    # -- the dispatcher thread --
    def _tick(self) -> None:
        now = time.monotonic()
        if now >= self._next_discover:
            self._next_discover = now + self.discover_interval_s
            self._discover()
        self._tend_hosts(now)
        self._kill_stuck_hosts(now)
        self._send()
        self._fail_queue_without_hosts(now)
        refs = [*self._batches, *self._pings]
        if not refs:
            self._wake.wait(TICK_S)
            self._wake.clear()
            return
        ready, _ = self._ray.wait(refs, num_returns=1, timeout=TICK_S)
        if ready:
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            batch = self._batches.pop(ref, None)
            if batch is not None:
                self._collect(ref, batch)
            elif ref in self._pings:
                self._pinged(ref)

    def _run(self) -> None:
        while not self._closed:
            try:
                self._tick()
            except Exception:  # a bug here must not leave futures hanging: fail what is pending, keep going
                log.exception("EvalPool(mode='ray') dispatcher failed; pending jobs resolve to env_error")
                self._fail_everything("the Ray dispatcher failed", traceback.format_exc(limit=10))
                time.sleep(TICK_S)

    def _fail_everything(self, why: str, details: str = "") -> None:
        with self._lock:
            left = list(self._inflight.values())
            self._inflight.clear()
            self._queue.clear()
        self._batches.clear()
        for h in self._hosts.values():
            h.batches = h.jobs = 0
        for p in left:
            self._resends.pop(p.key, None)
            self._resolve_futures(p, Result.env_error(why, task=p.job.task, details=details))

    # -- public API (submit and map are PoolBase's) --
    def stats(self) -> dict[str, int]:
        """The driver's counters (jobs, cache hits, batches, host_deaths, host_hangs, resends), hosts by
        state, jobs queued, and the sum of the up hosts' local-pool counters (restarts, timeouts, crashes)
        and their restart costs (`combined_spans`) as of their latest reply. Never calls a host: it returns
        at once, whatever the hosts are doing."""
        out = super().stats()
        with self._lock:
            out["queued"] = len(self._queue)
        hosts = list(self._hosts.values())
        for state in ("up", "down", "dead"):
            out[f"hosts_{state}"] = sum(h.state == state for h in hosts)
        out["inflight_batches"] = sum(h.batches for h in hosts)
        local = [h.local for h in hosts if h.state == "up"]
        for name in ("restarts", "timeouts", "crashes", "spare_swaps"):
            out[name] = sum(int(s.get(name, 0)) for s in local)
        out.update(combined_spans(local))
        return out

    def host_info(self) -> list[dict[str, Any]]:
        """Each host's state and its last `info()` (pid, hostname, backend, workers): diagnostics, tests."""
        return [{"node_id": h.spot.node_id, "address": h.spot.address, "state": h.state, **h.info}
                for h in list(self._hosts.values())]

    def close(self) -> None:
        """Stop the dispatcher, resolve what is pending to env_error, stop the hosts (and Ray, if this pool
        started it)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join(30)
        self._fail_everything("EvalPool closed before the job finished")
        for h in self._hosts.values():
            if h.state == "dead":
                continue
            try:  # a host that is up stops its workers itself; one restarting is just killed
                if h.state == "up":
                    self._ray.get(h.handle.close.remote(), timeout=10)
            except Exception:
                pass
            try:
                self._ray.kill(h.handle, no_restart=True)
            except Exception:
                pass
        self._shutdown_ray()

    def _shutdown_ray(self) -> None:
        if self._owns_ray:
            self._owns_ray = False
            self._ray.shutdown()
