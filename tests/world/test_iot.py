"""IoT flow features (the budgeted-online paper's Table IV), the IoT loaders and the fat/thin partition."""

import numpy as np
import pandas as pd
import pytest

from fedselect.world.data.catalog import load_dataset
from fedselect.world.data.datasets import DatasetNotFoundError
from fedselect.world.data.iot_flows import FEATURES, flow_features, load_flow_csv
from fedselect.world.data.iot_synthetic import synthetic_iot_flows
from fedselect.world.data.partition import make_partitioner

COLS = ["device", "start", "end", "bytes_in", "bytes_out", "packets", "dst_ip", "dst_port", "protocol", "dns_query"]
ROWS = [
    # device a, window 0 = [0, 100)
    ("a", 0, 10, 100, 50, 3, "1.1.1.1", 443, 6, ""),
    ("a", 5, 20, 200, 0, 2, "1.1.1.2", 443, 6, ""),
    ("a", 30, 31, 40, 20, 2, "9.9.9.9", 53, 17, "x.com"),
    ("a", 50, 51, 40, 20, 2, "9.9.9.9", 53, 17, "y.com"),
    ("a", 70, 71, 40, 20, 2, "9.9.9.9", 53, 17, "x.com"),
    ("a", 80, 130, 500, 500, 10, "1.1.1.1", 8080, 6, ""),  # runs past the window: clipped at 100
    ("a", 90, 95, 10, 0, 1, "2.2.2.2", 123, 17, ""),  # inside the previous flow
    # device a, window 1 = [100, 200): NTP only
    ("a", 150, 155, 30, 30, 2, "2.2.2.2", 123, 17, ""),
    ("a", 175, 176, 20, 20, 2, "2.2.2.2", 123, 17, ""),
    # device b, window 0: one empty zero-length flow
    ("b", 20, 20, 0, 0, 0, "5.5.5.5", 80, 6, ""),
]


def hand_table():
    return pd.DataFrame(ROWS, columns=COLS)


def test_flow_features_hand_computed():
    f = flow_features(hand_table(), window=100.0)
    assert list(f.columns) == ["device", "window", *FEATURES]
    assert list(zip(f["device"], f["window"])) == [("a", 0), ("a", 1), ("b", 0)]
    a0, a1, b0 = (f.iloc[i][list(FEATURES)].to_dict() for i in range(3))
    # union of [0,10] [5,20] [30,31] [50,51] [70,71] [80,100] [90,95] = 20 + 1 + 1 + 1 + 20
    assert a0 == pytest.approx(
        {
            "sleep_time": 57.0,
            "active_time": 43.0,
            "volume": 1540.0,
            "flow_rate": 1540.0 / 43.0,
            "avg_packet_size": 1540.0 / 22.0,
            "num_servers": 2.0,  # 1.1.1.1, 1.1.1.2 (DNS, NTP excluded)
            "num_protocols": 4.0,  # ports 443, 53, 8080, 123
            "num_dns_queries": 2.0,
            "dns_interval": 20.0,  # DNS at 30, 50, 70
            "ntp_interval": 100.0,  # one NTP flow: censored at the window length
        }
    )
    assert a1 == pytest.approx(
        {
            "sleep_time": 94.0,
            "active_time": 6.0,
            "volume": 100.0,
            "flow_rate": 100.0 / 6.0,
            "avg_packet_size": 25.0,
            "num_servers": 0.0,
            "num_protocols": 1.0,
            "num_dns_queries": 0.0,
            "dns_interval": 100.0,
            "ntp_interval": 25.0,
        }
    )
    assert b0 == pytest.approx(
        {
            "sleep_time": 100.0,
            "active_time": 0.0,
            "volume": 0.0,
            "flow_rate": 0.0,
            "avg_packet_size": 0.0,
            "num_servers": 1.0,
            "num_protocols": 1.0,
            "num_dns_queries": 0.0,
            "dns_interval": 100.0,
            "ntp_interval": 100.0,
        }
    )


def test_flow_features_input_checks():
    with pytest.raises(ValueError, match="dst_port"):
        flow_features(hand_table().drop(columns=["dst_port"]))
    bad = hand_table()
    bad.loc[0, "end"] = -1
    with pytest.raises(ValueError, match="start <= end"):
        flow_features(bad)
    with pytest.raises(ValueError, match="window"):
        flow_features(hand_table(), window=0)
    # dns_query is optional; date-time columns are converted to seconds
    t = hand_table().drop(columns=["dns_query"])
    t["start"] = pd.to_datetime(t["start"], unit="s")
    t["end"] = pd.to_datetime(t["end"], unit="s")
    g = flow_features(t, window=100.0)
    assert g.loc[0, "active_time"] == pytest.approx(43.0) and g.loc[0, "num_dns_queries"] == 0


def test_flow_csv_round_trip(tmp_path):
    path = tmp_path / "flows.csv"
    hand_table().to_csv(path, index=False)
    back = load_flow_csv(path)  # empty dns_query cells come back as NaN
    pd.testing.assert_frame_equal(flow_features(back, 100.0), flow_features(hand_table(), 100.0))
    with pytest.raises(DatasetNotFoundError):
        load_flow_csv(tmp_path / "missing.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetNotFoundError, match="no"):
        load_flow_csv(tmp_path / "empty")


def test_iot_flows_loader_drops_small_devices(tmp_path):
    flows = synthetic_iot_flows(np.random.default_rng(3), windows=30)
    keep = flows["device"].isin(["camera-0", "hub-0", "smart-plug-0", "weather-station-0"])
    flows = flows[keep | ((flows["device"] == "smoke-alarm-0") & (flows["start"] < 5 * 3600))]
    (tmp_path / "flows").mkdir()
    flows.to_csv(tmp_path / "flows" / "day1.csv", index=False)
    train, test = load_dataset("iot-flows", seed=1, path=str(tmp_path / "flows"), min_records=20)
    assert train.class_names == ["camera-0", "hub-0", "smart-plug-0", "weather-station-0"]
    assert train.info["dropped_devices"] == ["smoke-alarm-0"]
    assert train.input_shape == (10,) and train.num_classes == 4
    n = len(train) + len(test)
    assert len(test) == pytest.approx(0.2 * n, abs=1)
    x = np.concatenate([train.x, test.x])
    assert x.min() == 0.0 and x.max() == 1.0  # min-max scaled over all rows
    with pytest.raises(ValueError, match="path"):
        load_dataset("iot-flows", seed=0)
    with pytest.raises(DatasetNotFoundError):
        load_dataset("iot-flows", seed=0, path=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="min_records"):
        load_dataset("iot-flows", seed=0, path=str(tmp_path / "flows"), min_records=1000)


def test_iot_features_loader(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.random((60, 10)), columns=[f"f{i}" for i in range(10)])
    df["label"] = ["cam"] * 30 + ["plug"] * 25 + ["rare"] * 5
    df.to_csv(tmp_path / "features.csv", index=False)
    train, test = load_dataset("iot-features", seed=0, path=str(tmp_path / "features.csv"), min_records=10)
    assert train.class_names == ["cam", "plug"] and len(train) + len(test) == 55


def test_synthetic_iot_is_named_and_deterministic():
    a_train, a_test = load_dataset("iot-synthetic", seed=5, windows=120, min_records=50)
    b_train, _ = load_dataset("iot-synthetic", seed=5, windows=120, min_records=50)
    c_train, _ = load_dataset("iot-synthetic", seed=6, windows=120, min_records=50)
    assert "synthetic" in a_train.name and a_train.info["synthetic"] is True
    assert a_train.num_classes == 10 and a_train.input_shape == (10,)
    np.testing.assert_array_equal(a_train.x, b_train.x)
    assert not np.array_equal(a_train.x[:50], c_train.x[:50])
    # per-device-type behaviour: cameras move far more bytes per window than smart plugs
    flows = synthetic_iot_flows(np.random.default_rng(0), windows=40)
    feats = flow_features(flows)
    vol = feats.groupby("device")["volume"].median()
    assert vol["camera-0"] > 100 * vol["smart-plug-0"]


def test_fat_thin_partition_sizes_and_overlap():
    p = make_partitioner("fat_thin")
    labels = np.zeros(2000, dtype=np.int64)
    parts = p.split(labels, 100, np.random.default_rng(0))
    sizes = np.array([len(x) for x in parts])
    fat = p.fat_clients(100, np.random.default_rng(0))  # same first draw as split
    assert len(fat) == 20
    assert np.all((sizes[fat] >= 160) & (sizes[fat] <= 240))  # ~10% of 2000, +-20%
    thin = np.setdiff1d(np.arange(100), fat)
    assert np.all((sizes[thin] >= 16) & (sizes[thin] <= 24))  # ~1% of 2000
    assert all(len(np.unique(x)) == len(x) for x in parts)  # distinct inside a client
    assert sizes.sum() > 2000  # drawn with replacement across clients: they overlap
    again = make_partitioner("fat_thin").split(labels, 100, np.random.default_rng(0))
    assert all(np.array_equal(x, y) for x, y in zip(parts, again))
    with pytest.raises(ValueError, match="fat_share"):
        make_partitioner("fat_thin", fat_share=0)
    with pytest.raises(ValueError, match="fat_fraction"):
        make_partitioner("fat_thin", fat_fraction=1.5)


def test_iot_synthetic_19_device_types_and_the_default_unchanged():
    import hashlib

    tr, te = load_dataset("iot-synthetic", seed=0)  # pinned before the option existed
    digest = hashlib.sha256(np.ascontiguousarray(tr.x).tobytes() + np.asarray(tr.y).tobytes()).hexdigest()
    assert digest == "06fc997890243120fb4ec42280b44f7f1d3ddb187d7c3fe0e54a3e28bd3fbd90" and tr.num_classes == 10
    tr19, te19 = load_dataset("iot-synthetic", seed=0, device_types=19)
    assert tr19.num_classes == 19 and len(np.unique(tr19.y)) == 19 and len(np.unique(te19.y)) == 19
    assert np.bincount(tr19.y).min() >= 100  # every type keeps its records (min_records 100)
    assert tr19.info["synthetic"] is True
    for bad in (0, 20, 2.0, True):
        with pytest.raises(ValueError, match=r"device_types must be an int in 1..19"):
            load_dataset("iot-synthetic", seed=0, device_types=bad)
