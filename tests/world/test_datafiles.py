"""Defects in users' data files are caught at load with the file, the line and the column
named, or dropped and counted with ``drop_invalid`` (issue 12, item 3). Every loader of user
files is covered: MNIST CSV and IDX, CIFAR-10 batches, MobiAct, IoT flows and features,
profile tables. The tests write small files in the official formats."""

from __future__ import annotations

import gzip
import json
import pickle
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.experiment.resolve import resolve_doc
from fedselect.experiment.run import run_experiment
from fedselect.world.data.catalog import load_dataset
from fedselect.world.data.checked_csv import Col, read_csv_checked
from fedselect.world.data.file_errors import DataFileError
from fedselect.world.data.iot_flows import FEATURES, load_flow_csv
from fedselect.world.data.mobiact import COLUMNS, read_mobiact
from fedselect.world.system import load_profiles
from support.mnist_files import mnist_rows, write_mnist


# ------------------------------------------------------------------------------ helpers
def edit_cell(path, line: int, col: int, value: str) -> None:
    """Set the cell at 1-based ``line`` and 0-based field ``col`` of a CSV file."""
    lines = path.read_text().split("\n")
    cells = lines[line - 1].split(",")
    cells[col] = value
    lines[line - 1] = ",".join(cells)
    path.write_text("\n".join(lines))


def err(fn, *a, **kw) -> str:
    with pytest.raises(DataFileError) as e:
        fn(*a, **kw)
    return str(e.value)


# ------------------------------------------------------------------------------ MNIST CSV
def test_mnist_csv_without_header_loads_every_row(tmp_path):
    """Issue example: 20 and 10 rows without a header load 20 and 10 samples (were 19 and 9)."""
    train, test = mnist_rows(20, 0), mnist_rows(10, 1)
    write_mnist(tmp_path / "m", train, test)
    tr, te = load_dataset("mnist", path=str(tmp_path / "m"))
    assert (len(tr), len(te)) == (20, 10)
    assert tr.info["header"] is False
    np.testing.assert_array_equal(tr.y, train[:, 0])
    np.testing.assert_allclose(tr.x[0, 0].reshape(-1), (np.arange(784) % 256) / 255.0, rtol=1e-6)
    np.testing.assert_allclose(te.x[9, 0].reshape(-1), test[9, 1:] / 255.0, rtol=1e-6)
    # the same rows under a header line: still 20 and 10, same values
    write_mnist(tmp_path / "h", train, test, header=True)
    tr2, te2 = load_dataset("mnist", path=str(tmp_path / "h"))
    assert (len(tr2), len(te2)) == (20, 10) and tr2.info["header"] is True
    np.testing.assert_array_equal(tr2.x, tr.x)
    # forcing header: true on the header-less file takes the first image as a header
    tr3, _ = load_dataset("mnist", path=str(tmp_path / "m"), header=True)
    assert len(tr3) == 19
    with pytest.raises(ValueError, match="option header must be 'auto', true or false"):
        load_dataset("mnist", path=str(tmp_path / "m"), header="maybe")


def test_mnist_csv_converted_in_blocks_is_bit_identical(tmp_path, monkeypatch):
    """The pixels become float32 a block of rows at a time (``_CONVERT_ROWS``, so that the whole
    table never exists in float64): the bytes are those of the whole table at once, x / 255 in
    float64 then float32, for blocks that divide the rows and blocks that do not; labels int64;
    a file with drop_invalid drops its bad row and converts the rest the same way."""
    import fedselect.world.data.images as images

    train, test = mnist_rows(23, 4), mnist_rows(7, 5)
    write_mnist(tmp_path / "m", train, test)
    want_train = (train[:, 1:].astype(np.float64).reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
    want_test = (test[:, 1:].astype(np.float64).reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
    for block in (1, 5, 7, 23, 8192):
        monkeypatch.setattr(images, "_CONVERT_ROWS", block)
        tr, te = load_dataset("mnist", path=str(tmp_path / "m"))
        assert tr.x.dtype == np.float32 and tr.x.shape == (23, 1, 28, 28) and tr.y.dtype == np.int64
        assert tr.x.tobytes() == want_train.tobytes() and te.x.tobytes() == want_test.tobytes()
        np.testing.assert_array_equal(tr.y, train[:, 0])
    assert float(tr.x[0, 0, 0, 1]) == np.float32(1 / 255.0)  # row 0's pixels are 0, 1, 2, ...
    edit_cell(tmp_path / "m" / "mnist_train.csv", 3, 8, "300")  # line 3 = row 2: out of range
    monkeypatch.setattr(images, "_CONVERT_ROWS", 4)
    tr, _ = load_dataset("mnist", path=str(tmp_path / "m"), drop_invalid=True)
    keep = np.r_[0:2, 3:23]
    assert len(tr) == 22 and tr.x.tobytes() == want_train[keep].tobytes()
    np.testing.assert_array_equal(tr.y, train[keep, 0])


@pytest.mark.parametrize(
    "line,col,value,message",
    [
        (5, 100, "", "line 5, column 101 (pixel100): missing value"),
        (3, 0, "10", "line 3, column 1 (label): unknown label 10 outside [0, 9]"),
        (4, 6, "abc", "line 4, column 7 (pixel6): not a number: 'abc'"),
        (2, 8, "300", "line 2, column 9 (pixel8): value 300 outside [0, 255]"),
        (6, 2, "nan", "line 6, column 3 (pixel2): not a finite number: 'nan'"),
        (7, 2, "inf", "line 7, column 3 (pixel2): not a finite number: inf"),
        (8, 1, "1.5", "line 8, column 2 (pixel1): not an integer: 1.5"),
        (9, 784, "1,2", "line 9: malformed row: 786 fields, expected 785"),
    ],
)
def test_mnist_csv_defects_name_file_line_column(tmp_path, line, col, value, message):
    write_mnist(tmp_path / "m", mnist_rows(20, 0), mnist_rows(10, 1))
    f = tmp_path / "m" / "mnist_train.csv"
    edit_cell(f, line, col, value)
    assert err(load_dataset, "mnist", path=str(tmp_path / "m")) == f"{f}: {message}"
    # drop_invalid: the row goes, the count is reported
    tr, te = load_dataset("mnist", path=str(tmp_path / "m"), drop_invalid=True)
    assert len(tr) == 19 and len(te) == 10
    assert tr.info["dropped_rows"] == {str(f): 1} and "dropped_rows" not in te.info


def test_mnist_csv_file_level_defects_name_the_file(tmp_path):
    write_mnist(tmp_path / "m", mnist_rows(4, 0), mnist_rows(3, 1))
    f = tmp_path / "m" / "mnist_test.csv"
    f.write_bytes(f.read_bytes().replace(b"\n", b"\n\xff", 1))  # not UTF-8 on line 2
    assert err(load_dataset, "mnist", path=str(tmp_path / "m")).startswith(f"{f}: line 2: not UTF-8 text (byte 0xff)")
    f.write_text("1,2,3\n4,5,6\n")
    assert err(load_dataset, "mnist", path=str(tmp_path / "m")) == (
        f"{f}: line 1: 3 fields, expected 785 (MNIST CSV (label 0..9 then 784 pixels 0..255 per row))"
    )
    f.write_text("")
    assert "empty file (no rows)" in err(load_dataset, "mnist", path=str(tmp_path / "m"))
    f.write_text("\n\n")
    assert "empty file (no rows)" in err(load_dataset, "mnist", path=str(tmp_path / "m"))


def test_blank_lines_are_skipped_and_do_not_shift_line_numbers(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("a,b\n\n1,2\n   \n3,\n")
    cols = [Col("a", "int", at=0), Col("b", at=1)]
    assert err(read_csv_checked, f, cols, header=True) == f"{f}: line 5, column 2 (b): missing value"
    t = read_csv_checked(f, cols, header=True, drop_invalid=True)
    assert t.lines.tolist() == [3] and t.dropped == [(5, "column 2 (b): missing value")]
    # a quoted file takes the line-by-line pass: same lines
    f.write_text('a,b\n\n"1",2\n\n3,""\n')
    assert err(read_csv_checked, f, cols, header=True) == f"{f}: line 5, column 2 (b): missing value"
    f.write_text('a,b\n1,"2\n')
    assert err(read_csv_checked, f, cols, header=True) == f"{f}: line 2: malformed CSV (unexpected end of data)"


# ------------------------------------------------------------------------------ MNIST IDX
def write_idx(path, arr: np.ndarray, code: int = 0x08, gz: bool = False) -> None:
    head = bytes([0, 0, code, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    data = head + arr.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def write_idx_dir(d, labels_train=(1, 2, 3), gz=False):
    d.mkdir(parents=True, exist_ok=True)
    sfx = ".gz" if gz else ""
    x = np.arange(3 * 28 * 28).reshape(3, 28, 28) % 256
    write_idx(d / f"train-images-idx3-ubyte{sfx}", x, gz=gz)
    write_idx(d / f"train-labels-idx1-ubyte{sfx}", np.asarray(labels_train), gz=gz)
    write_idx(d / f"t10k-images-idx3-ubyte{sfx}", x[:2], gz=gz)
    write_idx(d / f"t10k-labels-idx1-ubyte{sfx}", np.asarray([4, 5]), gz=gz)


def test_idx_files_are_checked(tmp_path):
    write_idx_dir(tmp_path / "ok", gz=True)
    tr, te = load_dataset("mnist", path=str(tmp_path / "ok"))
    assert tr.y.tolist() == [1, 2, 3] and te.y.tolist() == [4, 5]
    np.testing.assert_allclose(tr.x[1, 0, 0, :3], np.array([784, 785, 786]) % 256 / 255.0, rtol=1e-6)
    # an unknown label: names the labels file and the item
    write_idx_dir(tmp_path / "bad", labels_train=(1, 12, 3))
    f = tmp_path / "bad" / "train-labels-idx1-ubyte"
    assert (
        err(load_dataset, "mnist", path=str(tmp_path / "bad"))
        == f"{f}: item 2 (0-based index 1): unknown label 12 outside [0, 9]"
    )
    tr, _ = load_dataset("mnist", path=str(tmp_path / "bad"), drop_invalid=True)
    assert tr.y.tolist() == [1, 3] and tr.info["dropped_rows"] == {str(f): 1}
    # a corrupted gzip stream names the file
    g = tmp_path / "ok" / "t10k-labels-idx1-ubyte.gz"
    g.write_bytes(g.read_bytes()[:12])
    assert err(load_dataset, "mnist", path=str(tmp_path / "ok")).startswith(f"{g}: cannot read IDX file (gzip) (EOFError")
    # truncated, wrong shape
    write_idx_dir(tmp_path / "t")
    f = tmp_path / "t" / "t10k-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-5])
    assert (
        err(load_dataset, "mnist", path=str(tmp_path / "t"))
        == f"{f}: IDX header says [2, 28, 28] but holds 1563 values (truncated?)"
    )
    write_idx(f, np.zeros((2, 27, 29)))
    assert err(load_dataset, "mnist", path=str(tmp_path / "t")) == f"{f}: images must have shape (n, 28, 28), got (2, 27, 29)"


# ------------------------------------------------------------------------------ CIFAR-10
def write_cifar(d, labels_per_batch: dict[str, list[int]]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, labels in labels_per_batch.items():
        n = len(labels)
        data = (np.arange(n * 3072) % 251).astype(np.uint8).reshape(n, 3072)
        batch = {
            b"batch_label": name.encode(),
            b"labels": list(labels),
            b"data": data,
            b"filenames": [f"img{i}.png".encode() for i in range(n)],
        }
        (d / name).write_bytes(pickle.dumps(batch, protocol=2))


def test_cifar_batches_are_read_and_checked(tmp_path):
    d = tmp_path / "cifar-10-batches-py"
    write_cifar(d, {"data_batch_1": [0, 9, 3], "data_batch_2": [5], "test_batch": [1, 2]})
    tr, te = load_dataset("cifar10", path=str(tmp_path))
    assert tr.y.tolist() == [0, 9, 3, 5] and te.y.tolist() == [1, 2] and tr.x.shape == (4, 3, 32, 32)
    assert tr.x[0, 0, 0, 1] == pytest.approx(1 / 255.0) and tr.x[0, 2, 31, 31] == pytest.approx((3071 % 251) / 255.0)
    write_cifar(d, {"data_batch_2": [5, 10]})
    f = d / "data_batch_2"
    assert err(load_dataset, "cifar10", path=str(d)) == f"{f}: item 2 (0-based index 1): unknown label 10 outside [0, 9]"
    tr, _ = load_dataset("cifar10", path=str(d), drop_invalid=True)
    assert tr.y.tolist() == [0, 9, 3, 5] and tr.info["dropped_rows"] == {str(f): 1}
    f.write_bytes(f.read_bytes()[:200])  # truncated
    assert err(load_dataset, "cifar10", path=str(d)).startswith(f"{f}: cannot read CIFAR-10 python batch (")
    f.write_bytes(pickle.dumps({b"data": np.zeros((2, 3000), np.uint8), b"labels": [1, 2]}, protocol=2))
    assert (
        err(load_dataset, "cifar10", path=str(d)) == f"{f}: b'data' must be a (n, 3072) uint8 array, got ndarray (2, 3000) uint8"
    )
    f.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, protocol=2))
    assert err(load_dataset, "cifar10", path=str(d)) == f"{f}: b'labels' must be 2 integers (one per image), got int64 (1,)"


# ------------------------------------------------------------------------------ MobiAct
def write_trial(root, act="WAL", subject=1, trial=1, n=300, rate=87.0, edit=None):
    t = np.arange(n) / rate
    frame = pd.DataFrame(
        {
            "timestamp": (1_500_000_000_000 + np.round(t * 1e9)).astype(np.int64),
            "rel_time": t,
            "acc_x": 2 * t + 1,
            "acc_y": np.full(n, 9.81),
            "acc_z": np.zeros(n),
            "gyro_x": np.zeros(n),
            "gyro_y": 0.1 * t,
            "gyro_z": np.zeros(n),
            "azimuth": np.zeros(n),
            "pitch": np.zeros(n),
            "roll": np.zeros(n),
            "label": [act] * n,
        }
    )
    assert tuple(frame.columns) == COLUMNS
    if edit:
        frame = frame.astype(object)
        for (row, col), v in edit.items():
            frame.loc[row, col] = v
    folder = root / "Annotated Data" / act
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{act}_{subject}_{trial}_annotated.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "edit,message",
    [
        ({(9, "acc_x"): ""}, "line 11, column 3 (acc_x): missing value"),
        ({(0, "gyro_z"): "fast"}, "line 2, column 8 (gyro_z): not a number: 'fast'"),
        ({(4, "label"): "XYZ"}, "line 6, column 12 (label): unknown label 'XYZ'; allowed: ['STD'"),
        ({(4, "label"): ""}, "line 6, column 12 (label): missing value"),
        ({(7, "timestamp"): "inf"}, "line 9, column 1 (timestamp): not a finite number: inf"),
    ],
)
def test_mobiact_defects_name_file_line_column(tmp_path, edit, message):
    write_trial(tmp_path, "WAL", 1, 1)
    f = write_trial(tmp_path, "WAL", 2, 1, edit=edit)
    assert err(read_mobiact, tmp_path).startswith(f"{f}: {message}")
    recs, info = read_mobiact(tmp_path, drop_invalid=True)
    assert len(recs) == 2 and info["dropped_rows"] == {str(f): 1}
    # option through the registry; the count reaches the data set's info
    tr, te = load_dataset("mobiact", path=str(tmp_path), drop_invalid=True, task="activity", test_subjects=[2], window=50)
    assert tr.info["dropped_rows"] == te.info["dropped_rows"] == {str(f): 1}


def test_mobiact_read_errors_name_the_file(tmp_path):
    write_trial(tmp_path, "WAL", 1, 1)
    f = write_trial(tmp_path, "WAL", 2, 1)
    f.write_text("timestamp,acc_x\n1,2\n")
    assert err(read_mobiact, tmp_path).startswith(
        f"{f}: line 1: the header lacks columns ['acc_y', 'acc_z', 'gyro_x', 'gyro_y', 'gyro_z']"
    )


# ------------------------------------------------------------------------------ IoT
def features_csv(path, empty=None):
    """2 devices x 10 rows of features (issue example); ``empty`` = (data row, feature) left blank."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.random((20, 10)).round(4), columns=[f"f{i}" for i in range(10)])
    df["label"] = ["cam"] * 10 + ["plug"] * 10
    df = df.astype(object)
    if empty:
        df.loc[empty[0], f"f{FEATURES.index(empty[1])}"] = ""
    df.to_csv(path, index=False)
    return path


def test_iot_features_empty_volume_is_refused(tmp_path):
    """Issue example: one empty ``volume`` cell (data row 6 = line 8) is refused naming the
    file, the line and the column, not trained on as NaN."""
    f = features_csv(tmp_path / "features.csv", empty=(6, "volume"))
    assert err(load_dataset, "iot-features", path=str(f), min_records=5) == f"{f}: line 8, column 3 (volume): missing value"
    tr, te = load_dataset("iot-features", path=str(f), min_records=5, drop_invalid=True)
    assert len(tr) + len(te) == 19 and tr.info["dropped_rows"] == {str(f): 1}
    assert np.isfinite(tr.x).all() and np.isfinite(te.x).all()
    # the label column: empty, and too few columns
    g = features_csv(tmp_path / "g.csv")
    edit_cell(g, 4, 10, "")
    assert err(load_dataset, "iot-features", path=str(g), min_records=5) == f"{g}: line 4, column 11 (device): missing value"
    g.write_text("a,b,c\n1,2,x\n")
    assert "line 1: 3 fields, expected at least 11" in err(load_dataset, "iot-features", path=str(g))


def flows_frame():
    rows = []
    for dev in ("a", "b"):
        for w in range(3):
            rows.append((dev, 100 * w + 1, 100 * w + 5, 100, 50, 3, "1.1.1.1", 443, 6, ""))
            rows.append((dev, 100 * w + 10, 100 * w + 12, 40, 20, 2, "9.9.9.9", 53, 17, "x.com"))
    return pd.DataFrame(
        rows,
        columns=["device", "start", "end", "bytes_in", "bytes_out", "packets", "dst_ip", "dst_port", "protocol", "dns_query"],
    )


def test_iot_flows_empty_bytes_in_is_refused(tmp_path):
    """Issue example: an empty ``bytes_in`` is refused (it used to pass, and the window's
    volume then lost the same flow's ``bytes_out`` too)."""
    df = flows_frame().astype(object)
    df.loc[2, "bytes_in"] = ""
    f = tmp_path / "flows.csv"
    df.to_csv(f, index=False)
    assert err(load_flow_csv, f) == f"{f}: line 4, column 4 (bytes_in): missing value"
    assert (
        err(load_dataset, "iot-flows", path=str(f), window=100.0, min_records=2)
        == f"{f}: line 4, column 4 (bytes_in): missing value"
    )
    flows = load_flow_csv(f, drop_invalid=True)
    assert len(flows) == 11 and flows.attrs["dropped_rows"] == {str(f): 1}
    tr, te = load_dataset("iot-flows", path=str(f), window=100.0, min_records=2, drop_invalid=True, test_fraction=0.5)
    assert tr.info["dropped_rows"] == {str(f): 1}


@pytest.mark.parametrize(
    "col,value,message",
    [
        ("start", "yesterday", "column 2 (start): not a number of seconds or a date-time: 'yesterday'"),
        ("end", "0", "column 3 (end): flow ends before it starts (start 1 s, end 0 s)"),
        ("packets", "-1", "column 6 (packets): value -1 outside [0, inf]"),
        ("dst_port", "70000", "column 8 (dst_port): value 70000 outside [0, 65535]"),
        ("device", "", "column 1 (device): missing value"),
    ],
)
def test_iot_flows_bad_values(tmp_path, col, value, message):
    df = flows_frame().astype(object)
    df.loc[0, col] = value
    f = tmp_path / "flows.csv"
    df.to_csv(f, index=False)
    assert err(load_flow_csv, f) == f"{f}: line 2, {message}"


def test_iot_flows_date_times_still_load(tmp_path):
    df = flows_frame()
    df["start"] = pd.to_datetime(df["start"], unit="s").astype(str)
    f = tmp_path / "flows.csv"
    df.to_csv(f, index=False)
    back = load_flow_csv(f)
    assert back["start"].tolist()[:2] == [1.0, 10.0]


# ------------------------------------------------------------------------------ profiles
def test_profile_files_name_line_and_key(tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text(
        "devices:\n  - {name: a, mean_mhz: 100, std_mhz: 1, cores: 2}\n  - name: b\n    mean_mhz: .nan\n"
        "    std_mhz: 1\n    cores: 2\nnetworks:\n  - {name: n, mean_mbps: 5, std_mbps: 1}\n"
    )
    assert err(load_profiles, y) == f"{y}: line 4, key devices[1].mean_mhz: not a finite number: nan"
    y.write_text("devices:\n  - {name: a, mean_mhz: 100, std_mhz: 1, cores: two}\n")
    assert err(load_profiles, y) == f"{y}: line 2, key devices[0].cores: not a number: 'two'"
    y.write_text("networks:\n  - {name: n, mean_mbps: -5, std_mbps: 1}\n")
    assert err(load_profiles, y).startswith(f"{y}: line 2: network profile 'n': need mean_mbps > 0")
    c = tmp_path / "p.csv"
    c.write_text("kind,name,mean_mhz,std_mhz,cores,mean_mbps,std_mbps\ndevice,a,100,1,2,,\nnetwork,n,,,,5,1\n")
    d, n = load_profiles(c)
    assert d[0].cores == 2 and isinstance(d[0].cores, int) and n[0].mean_mbps == 5.0
    c.write_text("kind,name,mean_mhz,std_mhz,cores,mean_mbps,std_mbps\ndevice,a,100,1,2,,\nnetwork,n,,,,5,\n")
    assert (
        err(load_profiles, c)
        == f"{c}: line 3: network row lacks ['std_mbps']; a network row has exactly ['name', 'mean_mbps', 'std_mbps']"
    )
    c.write_text("kind,name,mean_mhz,std_mhz,cores\ndevice,a,100,1,inf\n")
    assert err(load_profiles, c) == f"{c}: line 2, column 5 (cores): not a finite number: inf"
    c.write_text("kind,name,mean_mhz,std_mhz,cores\nphone,a,100,1,2\n")
    assert err(load_profiles, c) == f"{c}: line 2, column 1 (kind): unknown value 'phone'; allowed: ['device', 'network']"


# ------------------------------------------------------------------------------ end to end
def iot_run_doc(path, **options):
    return {
        "name": "iotbad",
        "seed": 0,
        "rounds": 1,
        "clients_per_round": 2,
        "data": {
            "dataset": "iot-features",
            "num_clients": 2,
            "partition": {"scheme": "iid"},
            "options": {"path": str(path), "min_records": 5, **options},
        },
        "model": {"name": "mlp", "options": {"hidden": [4]}},
        "train": {"local_epochs": 1, "batch_size": 8, "lr": 0.05},
    }


def test_cli_refuses_a_defective_file_before_writing_and_drop_invalid_is_reported(tmp_path, caplog):
    f = features_csv(tmp_path / "features.csv", empty=(6, "volume"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(iot_run_doc(f)))
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["run", str(cfg), "-o", str(out), "-q"])
    assert r.exit_code == 2 and f"error: {f}: line 8, column 3 (volume): missing value" in " ".join(r.output.split())
    assert not out.exists()
    summary = run_experiment(resolve_doc(iot_run_doc(f, drop_invalid=True)), tmp_path / "dropped")
    assert summary["data_dropped_rows"] == 1
    assert json.loads((tmp_path / "dropped" / "summary.json").read_text())["data_dropped_rows"] == 1
    clean = run_experiment(resolve_doc(iot_run_doc(features_csv(tmp_path / "clean.csv"))), tmp_path / "clean")
    assert clean["data_dropped_rows"] == 0
    assert re.search(
        rf"{re.escape(str(f))}: dropped 1 invalid row\(s\) \(drop_invalid: true\): line 8: column 3 \(volume\): missing value",
        caplog.text,
    )
