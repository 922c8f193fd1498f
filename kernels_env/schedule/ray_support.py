"""Ray, imported only when asked for, with an error that says how to install it; and how a failed
call to a host actor is classified (the host was lost, or the job's batch failed on a live host)."""
from __future__ import annotations

from typing import Any

INSTALL_HINT = 'pip install ".[dist]"  (or: pip install "ray>=2.40")'


def require_ray() -> Any:
    """The `ray` module; ImportError naming the `dist` extra when it is not installed."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(f"EvalPool(mode='ray') needs Ray, which is not installed here ({e}); install the "
                          f"project's `dist` extra: {INSTALL_HINT}") from None
    return ray


def host_lost(exc: BaseException) -> bool:
    """True when a failed actor call means the host is gone or unreachable (actor or worker died, node
    removed, out of memory): its jobs go to another host. False for an exception raised by the host's own
    code (RayTaskError), which would fail again anywhere."""
    ray = require_ray()
    return isinstance(exc, ray.exceptions.RayError) and not isinstance(exc, ray.exceptions.RayTaskError)
