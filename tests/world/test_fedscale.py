"""FedScale's fleet files read the way FedScale reads them (docs/fleets.md "FedScale's files").

Every expected value below is worked out by hand from FedScale's own source
(SymbioticLab/FedScale), cited where it is used:

* ``fedscale/cloud/internal/client_metadata.py``, ``ClientMetadata.is_active(cur_time)``: online iff
  ``norm = cur_time % finish_time`` lies in ``[active[i], inactive[i]]``;
  ``get_completion_time(batch_size, local_steps, upload_size, download_size,
  augmentation_factor=3.0)``: computation ``augmentation_factor * batch_size * local_steps *
  computation / 1000`` s, communication ``(upload_size + download_size) / communication`` s;
* ``fedscale/cloud/client_manager.py``, ``ClientManager.register_client``: client id ``c`` gets
  ``user_trace[user_trace_keys[c % len(user_trace)]]`` (the keys in file order);
* ``fedscale/cloud/aggregation/aggregator.py``, ``client_register_handler``: client ids are 1, 2,
  ... and client ``c`` gets ``client_profiles.get(c % len(client_profiles), {"computation": 1.0,
  "communication": 1.0})``; ``run``: ``model_update_size = sys.getsizeof(pickle.dumps(model)) /
  1024.0 * 8.0`` kbit, used as both ``upload_size`` and ``download_size``.

fedselect's client k is FedScale's client k + 1.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fedselect.experiment.resolve import parse_experiment, resolve
from fedselect.experiment.simulation import Simulation
from fedselect.fl.availability import Trace, read_trace
from fedselect.world.fedscale import capacity_rows, main, trace_rows

# behaviour records in file order 3, 7, 5 (not sorted: FedScale takes the file's order)
B = {"active": [0], "inactive": [50], "finish_time": 300, "duration": 50, "model": "x"}
A = {"active": [100, 400], "inactive": [200, 600], "finish_time": 1000, "duration": 300, "model": "y"}
C = {"active": [250], "inactive": [250], "finish_time": 500, "duration": 0, "model": "z"}  # zero length


@pytest.fixture()
def trace(tmp_path, capsys):
    src = tmp_path / "client_behave_trace"
    src.write_bytes(pickle.dumps({3: B, 7: A, 5: C}))
    main(["trace", str(src), str(tmp_path / "t.csv"), "--clients", "5"])
    return Trace(5, *read_trace(tmp_path / "t.csv", 5)), capsys.readouterr().out


def test_who_is_online_as_fedscale_decides_it(trace):
    av, printed = trace
    # register_client: client id c = k + 1 takes keys[c % 3] of the keys in file order [3, 7, 5]:
    # k=0 -> c=1 -> keys[1] = 7 (A); k=1 -> keys[2] = 5 (C); k=2 -> keys[0] = 3 (B); k=3 -> A again; k=4 -> C.
    # (The old import sorted the ids and gave 0 -> 3, 1 -> 5, 2 -> 7 and nothing to clients 3, 4.)
    # is_active: online iff cur_time % finish_time lies in a period. A: [100, 200], [400, 600] of 1000;
    # B: [0, 50] of 300; C: the single instant 250 of 500 (see the last check).
    expected = {
        25.0: [0, 0, 1, 0, 0],  # before A's first period; B: 25 % 300 = 25 in [0, 50]
        150.0: [1, 0, 0, 1, 0],  # inside A's first period (clients 0 and 3); B: 150 > 50
        300.0: [0, 0, 1, 0, 0],  # after A's first period; B: 300 % 300 = 0, its period again
        500.0: [1, 0, 0, 1, 0],  # inside A's second period
        700.0: [0, 0, 0, 0, 0],  # after A's last period (before its finish_time); B: 700 % 300 = 100
        1150.0: [1, 0, 0, 1, 0],  # past A's finish_time: 1150 % 1000 = 150, the record repeats (old import: offline)
        2450.0: [1, 0, 0, 1, 0],  # 2450 % 1000 = 450
        910.0: [0, 0, 1, 0, 0],  # B: 910 % 300 = 10
    }
    for x, want in expected.items():
        assert av.online(1, x).astype(int).tolist() == want, x
    # nobody at 700 s: B's next period starts at 900 (700 % 300 = 100, the cycle from 600 ends at 900)
    # and A's at 1000 + 100 = 1100, so the server would wait until 900
    assert av.next_online(1, 700.0, range(5)) == 900.0
    assert av.online_until(1, 150.0, [0]).tolist() == [200.0] and av.online_until(1, 1150.0, [3]).tolist() == [1200.0]
    # a difference we keep and print: FedScale's closed [250, 250] puts C online at 250 s exactly;
    # here periods are [start, end) and a zero-length one is left out
    assert not av.online(1, 250.0)[[1, 4]].any()
    assert "zero length" in printed and "(k + 1) mod 3" in printed and "behavior_index" in printed


def test_fedscale_cursor_is_not_followed(trace):
    """is_active moves its cursor one period per call and never back at the wrap: asked at 500
    (cursor -> period 1) and then at 1150 (norm 150 < active[1] = 400) it answers offline,
    although 150 lies in period 0. Our answer depends on the time alone: online."""
    av, _ = trace
    assert av.online(1, 500.0)[0] and av.online(1, 1150.0)[0]


def test_trace_rows_cut_at_finish_time_and_close_open_periods(tmp_path):
    src = tmp_path / "b.pkl"
    # one active time without an inactive one (closed at finish_time), a period past finish_time (cut)
    src.write_bytes(
        pickle.dumps(
            {
                1: {"active": [10, 80], "inactive": [20], "finish_time": 100},
                2: {"active": [5], "inactive": [500], "finish_time": 100},
            }
        )
    )
    conv = trace_rows(src)
    # client 0 = FedScale id 1 -> keys[1 % 2] = 2; client 1 = id 2 -> keys[0] = 1
    assert conv.rows == [(0, 5.0, 100.0, 100.0), (1, 10.0, 20.0, 100.0), (1, 80.0, 100.0, 100.0)]
    assert any("cut at finish_time" in n for n in conv.notes) and any("IndexError" in n for n in conv.notes)


def _caps(tmp_path):
    src = tmp_path / "client_device_capacity"
    src.write_bytes(
        pickle.dumps(
            {
                1: {"computation": 20.0, "communication": 5000.0},
                2: {"computation": 5.0, "communication": 100.0},
                3: {"computation": 8.0, "communication": 800.0},
            }
        )
    )
    return src


def test_capacity_entries_map_as_fedscale_maps_them(tmp_path, capsys):
    conv = capacity_rows(_caps(tmp_path), clients=4)
    # client_register_handler: client id c = k + 1 takes key c % 3: 1, 2, 0 (missing: the default
    # {computation 1.0, communication 1.0}), 1
    ms = [20.0, 5.0, 1.0, 20.0]
    kbps = [5000.0, 100.0, 1.0, 5000.0]
    assert [r[0] for r in conv.rows] == [0, 1, 2, 3]
    assert [r[1] for r in conv.rows] == pytest.approx([1000 / (3 * m) for m in ms])
    assert [r[2] for r in conv.rows] == pytest.approx([1.024 * b for b in kbps])
    assert any("default profile" in n and "clients 2" in n for n in conv.notes)
    main(["capacity", str(_caps(tmp_path)), str(tmp_path / "c.csv"), "--clients", "4"])
    assert "count_download: true" in capsys.readouterr().out


def _sim(tmp_path, batch_size: int, epochs: int = 1):
    main(["capacity", str(_caps(tmp_path)), str(tmp_path / "c.csv"), "--clients", "4"])
    doc = {
        "name": "fedscale",
        "seed": 0,
        "method": "fedavg",
        "rounds": 1,
        "clients_per_round": 2,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": 4,
            "partition": {"scheme": "iid"},
            "holdout_fraction": 0.0,
            "validation": 0,
        },
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": epochs, "batch_size": batch_size, "workers": 0},
        "system": {"capacity": {"model": "file", "file": str(tmp_path / "c.csv")}, "count_download": True},
    }
    from fedselect.world.federation import build_federation

    cfg = parse_experiment(doc)
    fed = build_federation(cfg)
    return Simulation(resolve(cfg), fed, workers=0), fed


def test_one_clients_completion_time_is_fedscales(tmp_path):
    """Client 0 (FedScale id 1: computation 20 ms per sample, communication 5000 kbit/s), 1,000
    samples, B = 20, E = 1: 50 local steps; the MLP 784-8-10 has 784*8 + 8 + 8*10 + 10 = 6,370
    float32 parameters = 25,480 bytes = 25,480 / 1024 * 8 = 199.0625 kbit up and down.
    get_completion_time: computation 3 * 20 * 50 * 20 / 1000 = 60 s; communication
    (199.0625 + 199.0625) / 5000 = 0.079625 s; 60.079625 s in all. The import before this one
    gave 1000 * 20 / 1000 = 20 s of compute and 25480 * 8 / 5e6 = 0.040768 s of upload, the
    download left out: 20.040768 s."""
    sim, fed = _sim(tmp_path, batch_size=20)
    try:
        assert fed.clients[0].num_samples == 1000 and sim.algorithm.payload_bytes() == (25480, 25480)
        c = sim.ctx.cost.client_cost(0, 1, sim.ctx.draw(1))
        assert c.compute_s == pytest.approx(60.0, rel=1e-12)
        assert c.upload_s + c.download_s == pytest.approx(0.079625, rel=1e-12)
        assert c.latency_s == pytest.approx(60.079625, rel=1e-12)
        # the client with FedScale's default profile (key 3 % 3 = 0 missing): 3 * 20 * 50 * 1 / 1000
        # = 3 s and 2 * 199.0625 / 1.0 = 398.125 s of communication
        assert sim.ctx.cost.client_cost(2, 1, sim.ctx.draw(1)).latency_s == pytest.approx(401.125, rel=1e-12)
    finally:
        sim.close()


def test_partial_last_batch_is_the_one_difference(tmp_path):
    """B = 30: 1,000 samples are 34 steps, the last of 10 samples. FedScale charges full batches,
    3 * 30 * 34 * 20 / 1000 = 61.2 s; fedselect charges the samples trained, 3 * 1000 * 20 / 1000
    = 60 s (the converter prints this difference)."""
    sim, _ = _sim(tmp_path, batch_size=30)
    try:
        c = sim.ctx.cost.client_cost(0, 1, sim.ctx.draw(1))
        assert c.compute_s == pytest.approx(60.0, rel=1e-12) and 3 * 30 * 34 * 20 / 1000 == pytest.approx(61.2)
    finally:
        sim.close()


def test_pickles_are_loaded_without_running_code(tmp_path):
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({0: np.float64(1.0)}))
    with pytest.raises(ValueError, match="refused"):
        main(["trace", str(evil), str(tmp_path / "x.csv")])
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(pickle.dumps({"a": {"computation": 1.0, "communication": 1.0}}))
    with pytest.raises(ValueError, match="integer client id"):
        capacity_rows(bad)
