"""An in-process Flower ``Grid`` for fast tests of the strategy (no Ray, no processes).

Each "node" answers through the real ClientApp (``fedselect.flower.client_app``) called in this
process with a ``Context`` of its own (node config, kept state), the moment a message is pushed.
Nodes can join late (``join_at``: the ``get_node_ids`` call from which a node is listed), stay
silent, answer with an error or leave the federation (``behaviour``), and every message is
logged (``events``) so a test can check who was asked what, and when.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity


class LocalGrid(Grid):
    """``num_nodes`` nodes serving clients ``client_of[i]`` (default i) of one federation.

    Args:
        client_app: the ClientApp every node runs.
        num_nodes: nodes; node ids are ``1000 + i``.
        run_config: the run config every node sees.
        client_of: node index -> partition-id.
        join_at: node index -> the ``get_node_ids`` call (1-based) from which it is listed.
        behaviour: ``(message_type, client id, server-round) -> None | "silent" | "error" | "gone"``:
            answer normally, never answer, answer with a ClientApp error (code 2), or be
            unavailable (the SuperLink's code 5 reply).
    """

    def __init__(
        self,
        client_app,
        num_nodes: int,
        run_config: dict[str, Any],
        client_of: dict[int, int] | None = None,
        join_at: dict[int, int] | None = None,
        behaviour: Callable[[str, int, int], str | None] | None = None,
    ):
        # what a ServerApp process has: Message() reads the run and node id from it
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, SUPERLINK_NODE_ID, 1
        self.app = client_app
        self.ids = [1000 + i for i in range(num_nodes)]
        self.client = {1000 + i: (client_of or {}).get(i, i) for i in range(num_nodes)}
        self.join_at = {1000 + i: (join_at or {}).get(i, 1) for i in range(num_nodes)}
        self.contexts = {
            nid: Context(
                run_id=1,
                node_id=nid,
                node_config={"partition-id": self.client[nid], "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for nid in self.ids
        }
        self.behaviour = behaviour or (lambda kind, k, t: None)
        self.polls = 0
        self.left: set[int] = set()
        self.events: list[tuple] = []  # ("poll", None, n) or (message_type, client id, server-round)
        self._replies: dict[str, Message] = {}

    # ---------------------------------------------------------------- Grid
    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return getattr(self, "_run", None)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        self.polls += 1
        self.events.append(("poll", None, self.polls))
        return [n for n in self.ids if self.join_at[n] <= self.polls and n not in self.left]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        out = []
        online = set(n for n in self.ids if self.join_at[n] <= self.polls and n not in self.left)
        for msg in messages:
            mid = str(uuid4())
            msg.metadata.__dict__["_message_id"] = mid
            node = msg.metadata.dst_node_id
            if node not in online:
                continue  # the SuperLink refuses messages to unknown nodes (not stored)
            k = self.client[node]
            conf = msg.content.get("config") if msg.has_content() else None
            t = int(conf.get("server-round", 0)) if conf is not None else 0
            kind = msg.metadata.message_type
            self.events.append((kind, k, t))
            what = self.behaviour(kind, k, t)
            if what == "silent":
                pass
            elif what == "error":
                self._replies[mid] = Message(Error(2, f"injected failure of client {k}"), reply_to=msg)
            elif what == "gone":
                self._replies[mid] = Message(Error(5, "node unavailable"), reply_to=msg)
            else:
                try:
                    self._replies[mid] = self.app(msg, self.contexts[node])
                except Exception as e:  # as Flower does: the exception becomes an error reply
                    self._replies[mid] = Message(Error(2, f"{type(e).__name__}: {e}"), reply_to=msg)
            out.append(mid)
        return out

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(m) for m in list(message_ids) if m in self._replies]

    def send_and_receive(self, messages, *, timeout=None):
        ids = list(self.push_messages(messages))
        return list(self.pull_messages(ids))

    def leave(self, i: int) -> None:
        """Node ``i`` disappears from the SuperLink's list."""
        self.left.add(1000 + i)
