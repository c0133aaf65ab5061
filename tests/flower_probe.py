"""A ServerApp that probes fedselect's ClientApp (used by tests/test_flower_client.py in
Flower's simulation engine and in a real SuperLink/SuperNode deployment).

It waits for the nodes, queries them (through :func:`fedselect.flower.messaging.exchange`), sends a train message with the federation's initial
model to every node (round 1), a train message without ``server-round`` to one node (must
come back as an error reply), and an evaluate message, then writes what came back to a JSON
file for the test to check against our simulator.
"""

from __future__ import annotations

import hashlib
import json
import time

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

PROBE_KEYS = ("probe.out", "probe.nodes", "probe.timeout", "probe.evaluate")


def arrays_digest(state) -> str:
    """sha256 over the entries (name, dtype, shape, bytes) of a torch state dict."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def probe(grid: Grid, settings: dict, out: str, nodes: int, timeout: float = 120.0, with_evaluate: bool = True) -> None:
    from fedselect.flower.client_app import federation_for, node_experiment
    from fedselect.flower.messaging import exchange

    def send_and_receive(messages, timeout):
        ex = exchange(grid, messages, timeout)
        assert not ex.silent, f"nodes {ex.silent} did not answer within {timeout} s"
        return list(ex.replies.values())

    t_start = time.perf_counter()
    deadline = time.monotonic() + timeout
    while len(ids := sorted(grid.get_node_ids())) < nodes:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(ids)} of {nodes} nodes connected within {timeout} s")
        time.sleep(0.1)
    waited = time.perf_counter() - t_start
    t0 = time.perf_counter()
    _, cfg = node_experiment(settings, {"partition-id": 0, "num-partitions": nodes})
    init = federation_for(cfg).new_model().state_dict()
    res: dict = {"node_ids": ids, "waited_s": waited, "server_setup_s": time.perf_counter() - t0}

    t0 = time.perf_counter()
    q = send_and_receive(
        [Message(RecordDict({"config": ConfigRecord({"server-round": 1})}), dst_node_id=i, message_type="query") for i in ids],
        timeout=timeout,
    )
    res["query_s"] = time.perf_counter() - t0
    res["profiles"] = {str(r.metadata.src_node_id): dict(r.content["profile"]) for r in q if r.has_content()}
    client_of = {int(n): p["client-id"] for n, p in res["profiles"].items()}

    t0 = time.perf_counter()
    msgs = [
        Message(
            RecordDict({"arrays": ArrayRecord(init), "config": ConfigRecord({"server-round": 1})}),
            dst_node_id=i,
            message_type="train",
        )
        for i in ids
    ]
    replies = send_and_receive(msgs, timeout=timeout)
    res["train_s"] = time.perf_counter() - t0
    res["train"] = {}
    for r in replies:
        k = client_of[r.metadata.src_node_id]
        if r.has_error():
            res["train"][str(k)] = {"error": r.error.reason}
            continue
        res["train"][str(k)] = {
            "metrics": dict(r.content["metrics"]),
            "digest": arrays_digest(r.content["arrays"].to_torch_state_dict()),
            "keys": list(r.content["arrays"].keys()),
        }

    t0 = time.perf_counter()
    bad = send_and_receive(
        [Message(RecordDict({"arrays": ArrayRecord(init)}), dst_node_id=ids[0], message_type="train")], timeout=timeout
    )
    res["bad_s"] = time.perf_counter() - t0
    res["bad"] = [
        {
            "error": r.has_error(),
            "code": r.error.code if r.has_error() else None,
            "reason": r.error.reason if r.has_error() else None,
        }
        for r in bad
    ]

    ev = (
        []
        if not with_evaluate
        else send_and_receive(
            [
                Message(
                    RecordDict({"arrays": ArrayRecord(init), "config": ConfigRecord({"train-epochs": 1, "eval-split": "test"})}),
                    dst_node_id=ids[-1],
                    message_type="evaluate",
                )
            ],
            timeout=timeout,
        )
    )
    res["evaluate"] = {str(client_of[r.metadata.src_node_id]): dict(r.content["metrics"]) for r in ev if r.has_content()}
    res["total_s"] = time.perf_counter() - t_start
    with open(out, "w") as fh:
        json.dump(res, fh)


def make_probe(settings: dict, out: str, nodes: int, timeout: float = 120.0, with_evaluate: bool = True) -> ServerApp:
    """The probe for :func:`flwr.simulation.run_simulation` (which passes no run config)."""
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        probe(grid, settings, out, nodes, timeout, with_evaluate)

    return server


#: the probe for `flwr run` (settings, output file and node count from the run config)
app = ServerApp()


@app.main()
def _main(grid: Grid, context: Context) -> None:
    rc = dict(context.run_config)
    settings = {k: v for k, v in rc.items() if k not in PROBE_KEYS}
    probe(
        grid,
        settings,
        str(rc["probe.out"]),
        int(rc["probe.nodes"]),
        float(rc.get("probe.timeout", 120.0)),
        bool(rc.get("probe.evaluate", True)),
    )
