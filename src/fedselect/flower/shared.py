"""One copy of a federation for the server and every node of Flower's simulation engine.

In Flower's simulation engine the ServerApp and the simulated nodes run in one Ray session: the
ServerApp in the process that started Ray, the nodes' ClientApps in its actors (one per CPU).
Without sharing, every actor loads the data set again and builds the federation the server has
already built (full MNIST: 8 s and 1.7 GB at the peak of each load, 250 MB kept per actor).
Instead the server puts its federation into Ray's object store once
(:func:`share_federation`, called by :func:`fedselect.flower.engine.connect`), and every actor
reads it from there (:meth:`SharedFederations.federation`, called by
:func:`fedselect.flower.settings.federation_for`): one copy of the data on the machine, which
every actor maps without copying (its arrays are read-only there: nothing on a node writes to
its data).

How an actor learns of it: the ClientApp (:func:`fedselect.flower.client_app.make_client_app`)
holds a :class:`SharedFederations`, and the simulation engine sends the ClientApp to an actor with
every message (Ray pickles it); pickled in the server's process, it carries Ray references to the
federations shared there in the current Ray session, keyed by
:func:`fedselect.world.federation.federation_key` (the data, model, system and seed sections: two
configs with the same key build the same federation). A node whose experiment has another key,
a node outside Ray (a deployment's SuperNode, the test grids) or a federation that cannot be read
builds its own as before, with the same result.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from fedselect.world.federation import Federation

log = logging.getLogger("fedselect.flower")

__all__ = ["SharedFederations", "share_federation", "adopt_shared_data", "shared_keys", "ray_session"]

#: federation key -> (the Ray session it was put in, its ObjectRef), in the server's process
_PUT: dict[str, tuple[str, Any]] = {}
#: seconds to wait for a federation read back from the object store
_GET_TIMEOUT_S = 300
#: how many federations the server's process keeps in the object store (a comparison's runs
#: usually share one; older ones are dropped)
_KEEP = 2


def ray_session() -> str | None:
    """The id of the Ray session running in this process (its node id), None where Ray is not
    running here. Never imports Ray."""
    ray = sys.modules.get("ray")
    initialized = getattr(ray, "is_initialized", None)  # absent while another thread imports Ray
    if initialized is None or not initialized():
        return None
    return ray.get_runtime_context().get_node_id()


def share_federation(key: str, fed: Federation, wait_s: float = 0.0, stop=None) -> bool:
    """Put ``fed`` (of federation key ``key``) into the object store of the Ray session running
    in this process, for the simulation's nodes (module docstring); once per session and key.

    Args:
        wait_s: how long to wait for Ray to come up (Flower's simulation engine starts it beside
            the ServerApp); 0 = share only if it runs already.
        stop: a ``threading.Event`` that ends the wait once set.

    Returns:
        whether ``fed`` is shared now (False where no Ray session runs in this process, e.g. a
        deployment's ServerApp, or Ray failed to store it: the nodes then build their own).
    """
    deadline = time.monotonic() + wait_s
    session = ray_session()
    while session is None and time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        time.sleep(0.05)
        session = ray_session()
    if session is None:
        return False
    for k in [k for k, (s, _) in _PUT.items() if s != session]:  # references of an ended session
        del _PUT[k]
    if key in _PUT:
        return True
    import ray

    try:
        ref = ray.put(fed)
    except Exception as e:  # e.g. an object store too small: the nodes build their own
        log.warning("the federation could not be shared with the nodes through Ray's object store (%s); each builds its own", e)
        return False
    _PUT[key] = (session, ref)
    while len(_PUT) > _KEEP:
        del _PUT[next(iter(_PUT))]
    return True


def adopt_shared_data(key: str, fed: Federation) -> int:
    """Point the server's ``fed`` at the copy of its data that :func:`share_federation` put into
    the object store: its training and test sets' ``x`` and ``y`` become the read-only arrays the
    nodes map, and the process's own copies are freed (the full MNIST: 219 MB). Call it before
    anything keeps a reference to the old arrays (the server's trainer is built afterwards).

    Returns:
        the bytes of arrays adopted (0 where ``key`` is not shared in this process's Ray session,
        the stored copy cannot be read, or it does not hold the same arrays: nothing changes).
    """
    if key not in shared_keys():
        return 0
    try:
        import ray

        stored = ray.get(_PUT[key][1], timeout=_GET_TIMEOUT_S)
    except Exception as e:
        log.warning("the federation in Ray's object store could not be read back (%s); the server keeps its own copy", e)
        return 0
    pairs = [(getattr(fed, part), getattr(stored, part, None)) for part in ("train_set", "test_set")]
    if not all(
        theirs is not None and mine.x.shape == theirs.x.shape and mine.y.shape == theirs.y.shape for mine, theirs in pairs
    ):
        return 0
    adopted = 0
    for mine, theirs in pairs:
        adopted += theirs.x.nbytes + theirs.y.nbytes
        mine.x, mine.y = theirs.x, theirs.y
    return adopted


def shared_keys() -> list[str]:
    """The federation keys shared from this process in the current Ray session."""
    session = ray_session()
    return [k for k, (s, _) in _PUT.items() if s == session]


class SharedFederations:
    """The federations a ClientApp's nodes can read from Ray's object store (module docstring).

    Made empty in the process that builds the ClientApp; pickled there (by Ray, for each message
    to an actor) it carries the references of the federations shared from that process in the
    current Ray session, which the copy in the actor reads.
    """

    def __init__(self, refs: dict[str, Any] | None = None):
        self.refs: dict[str, Any] = dict(refs or {})

    def __reduce__(self):
        session = ray_session()
        refs = {k: ref for k, (s, ref) in _PUT.items() if s == session} if session is not None else {}
        return (SharedFederations, (refs,))

    def federation(self, key: str) -> Federation | None:
        """The shared federation of ``key`` (read-only arrays mapped from the object store), or
        None where none is shared or it cannot be read (logged)."""
        ref = self.refs.get(key)
        if ref is None:
            return None
        try:
            import ray

            fed = ray.get(ref, timeout=_GET_TIMEOUT_S)
        except Exception as e:
            log.warning("the server's federation could not be read from Ray's object store (%s); building it here", e)
            return None
        return fed if isinstance(fed, Federation) else None
