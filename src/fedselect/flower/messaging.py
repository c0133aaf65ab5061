"""Sending messages to nodes and collecting the replies, with the silent nodes named.

``Grid.send_and_receive`` (flwr 1.42) returns only the replies that arrived; in a deployment
(``HttpGrid``) it also polls the SuperLink every 3 s, which adds up to 3 s to every exchange.
:func:`exchange` pushes the messages (all at once, or a window of them at a time, longest
first: :class:`fedselect.flower.nodes.FlowerOptions` ``in_flight``), polls every ``poll_s``
(0.1 s by default) until every node has answered or ``timeout`` has passed, and says which nodes did not answer, so a
caller can record them as failures (a node that does not answer in time: ``timeout``; one
that is gone: ``dropout``) instead of waiting for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable

from flwr.app import Message
from flwr.serverapp import Grid

__all__ = ["Exchange", "exchange", "check_in_flight"]


@dataclass
class Exchange:
    """The outcome of :func:`exchange`.

    Attributes:
        replies: node id -> its reply (a reply may carry an error: ``reply.has_error()``,
            ``reply.error.code`` / ``.reason``; e.g. the ClientApp raised).
        silent: node ids that sent no reply before the timeout (or whose message could not be
            pushed), in the order the messages were given.
        seconds: wall time from the push to the last reply (or the timeout).
        arrival: node id -> seconds from the push until its reply was pulled (the measured
            round trip, up to ``poll_s`` late).
    """

    replies: dict[int, Message] = field(default_factory=dict)
    silent: list[int] = field(default_factory=list)
    seconds: float = 0.0
    arrival: dict[int, float] = field(default_factory=dict)


def check_in_flight(in_flight: int | None) -> None:
    """Raises ValueError unless ``in_flight`` is None (all at once) or an integer >= 1."""
    if in_flight is not None and (isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1):
        raise ValueError(f"in_flight must be an integer >= 1 or None (all at once), got {in_flight!r}")


def exchange(
    grid: Grid, messages: Iterable[Message], timeout: float, poll_s: float = 0.1, stop=None, in_flight: int | None = None
) -> Exchange:
    """Send ``messages`` (at most one per destination node) and wait for the replies.

    Args:
        stop: a ``threading.Event``; once set, the wait ends with KeyboardInterrupt (the run
            was interrupted: nothing more is recorded).
        in_flight: at most this many messages waiting for their reply at once: the first
            ``in_flight`` are pushed at the start and each reply lets the next one go, in the
            order given (None: all at once). A message still unpushed at the timeout is
            ``silent``. Its ``arrival`` counts from its own push.

    Raises:
        ValueError: two messages for the same node, ``timeout`` / ``poll_s`` not positive, or
            ``in_flight`` not an integer >= 1.
        KeyboardInterrupt: ``stop`` was set.
    """
    if not timeout > 0 or not poll_s > 0:
        raise ValueError(f"timeout and poll_s must be > 0, got {timeout} and {poll_s}")
    check_in_flight(in_flight)
    msgs = list(messages)
    dst = [m.metadata.dst_node_id for m in msgs]
    if len(set(dst)) != len(dst):
        raise ValueError(f"one message per node: node ids {sorted({d for d in dst if dst.count(d) > 1})} appear more than once")
    out = Exchange()
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout
    todo = list(zip(msgs, dst))
    waiting: dict[str, tuple[int, float]] = {}  # message id -> (node, its push)
    while True:
        room = len(todo) if in_flight is None else max(0, in_flight - len(waiting))
        if room and todo:
            batch, todo = todo[:room], todo[room:]
            # push_messages sets each message's id; the ids it returns are those stored (the in-memory
            # grid of the simulation engine leaves the others out, the HTTP grid returns None for them)
            pushed = time.perf_counter()
            stored = {mid for mid in grid.push_messages([m for m, _ in batch]) if mid}
            # a message not stored is never answered: it ends among the silent
            waiting.update({m.metadata.message_id: (node, pushed) for m, node in batch if m.metadata.message_id in stored})
        if not waiting and not todo:
            break
        if stop is not None and stop.is_set():
            raise KeyboardInterrupt("the Flower run was interrupted")
        got = grid.pull_messages(list(waiting)) if waiting else []
        for reply in got:
            node_pushed = waiting.pop(reply.metadata.reply_to_message_id, None)
            if node_pushed is not None:
                node, pushed = node_pushed
                out.replies[node] = reply
                out.arrival[node] = time.perf_counter() - pushed
        if (not waiting and not todo) or time.monotonic() >= deadline:
            break
        if not got or in_flight is None:
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    out.seconds = time.perf_counter() - t0
    out.silent = [node for node in dst if node not in out.replies]  # waiting, never pushed or not stored
    return out
