"""Loading a file never runs code (issue 12, item 7): checkpoints are read with
``torch.load(weights_only=True)`` (the payload is stored as plain data) and CIFAR-10 batches
with an unpickler that admits only NumPy's array reconstruction. A checkpoint and a CIFAR
batch crafted to call a function on load are refused, and the function never runs."""

from __future__ import annotations

import collections
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.experiment.checkpoint import (
    CheckpointError,
    decode_payload,
    encode_payload,
    load_checkpoint,
    read_checkpoint_file,
    save_checkpoint,
)
from fedselect.world.data.catalog import load_dataset
from fedselect.world.data.file_errors import DataFileError


def touch_marker(path: str) -> str:
    """The 'payload' of the crafted files: harmless, but proves whether it ran."""
    Path(path).write_text("code ran")
    return "pwned"


class Crafted:
    """Unpickling this calls ``touch_marker(path)`` (as ``os.system`` would be called)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (touch_marker, (self.path,))


def test_payload_round_trip_keeps_types_and_values():
    rng = np.random.default_rng(0)
    mt = np.random.Generator(np.random.MT19937(3)).bit_generator.state  # holds a uint32 array
    payload = {
        "round": 2,
        "rows": rng.random((3, 4)).astype(np.float32),
        "ids": np.arange(4, dtype=np.int64),
        "mask": np.array([True, False]),
        "be": np.arange(3, dtype=">f8"),
        "names": np.array(["ab", "c"]),
        "scalars": [np.float32(0.1), np.float64(2.5), np.int32(7), np.bool_(True)],
        "pcg": rng.bit_generator.state,
        "mt": mt,
        "tuple": (1, np.int64(2)),
        "od": collections.OrderedDict(b=1, a=2),
        np.int64(5): "numpy key",
        "inf": float("inf"),
        "t": torch.arange(3),
        "none": None,
        "fs": frozenset({1, 2}),
    }
    back = decode_payload(encode_payload(payload))
    assert back["rows"].dtype == np.float32 and np.array_equal(back["rows"], payload["rows"])
    assert back["be"].dtype == np.dtype(">f8") and back["names"].tolist() == ["ab", "c"]
    assert [type(v) for v in back["scalars"]] == [np.float32, np.float64, np.int32, np.bool_]
    assert back["scalars"][0] == np.float32(0.1)
    assert back["pcg"] == payload["pcg"] and np.array_equal(back["mt"]["state"]["key"], mt["state"]["key"])
    assert back["tuple"] == (1, 2) and type(back["tuple"][1]) is np.int64
    assert list(back["od"]) == ["b", "a"] and back[5] == "numpy key" and back["fs"] == frozenset({1, 2})
    with pytest.raises(TypeError, match=r"checkpoint payload\['obj'\]: a .*Crafted cannot be stored as plain data"):
        encode_payload({"obj": Crafted("x")})


def test_crafted_checkpoint_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran.txt"
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"round": 1, "method": {"x": Crafted(marker)}, "format_version": 3}, run / "checkpoint.pt")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(run)
    msg = str(e.value)
    assert f"{run / 'checkpoint.pt'}: refused to load: it asks for " in msg and "touch_marker" in msg
    said = msg.replace(str(tmp_path), "DIR")
    assert "nothing in the file was run" in said and "crafted" not in said and "corrupted" not in said
    assert not marker.exists()
    # the CLI: refused, exit 2, the function never ran
    (run / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "x",
                "rounds": 2,
                "clients_per_round": 2,
                "data": {"dataset": "mnist-embedded", "num_clients": 4, "partition": {"scheme": "iid"}},
                "model": {"name": "mlp", "options": {"hidden": [4]}},
            }
        )
    )
    r = CliRunner().invoke(app, ["run", "--resume", str(run), "-q"])
    assert r.exit_code == 2 and "refused to load" in " ".join(r.output.split())
    assert not marker.exists()
    # control: an unrestricted load of the same file does run it (so the test can fail)
    torch.load(run / "checkpoint.pt", weights_only=False)
    assert marker.read_text() == "code ran"


def _pickle_start(raw: bytes) -> int:
    """Offset of ``data.pkl``'s first byte inside a checkpoint (a zip archive)."""
    import io
    import struct
    import zipfile

    info = next(i for i in zipfile.ZipFile(io.BytesIO(raw)).infolist() if i.filename.endswith("data.pkl"))
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    return info.header_offset + 30 + name_len + extra_len


def test_a_damaged_checkpoint_is_called_corrupted_not_refused(tmp_path):
    """A flipped byte in the pickle stream reads as an unknown opcode, or turns torch._utils
    into a module that does not exist: weights_only refuses both, and the message says the file
    is corrupted (not that it asks for code). With both files damaged the CLI says so once per
    file and tells how to start again."""
    save_checkpoint(tmp_path, {"round": 2, "snapshot": {"w": np.ones(3, np.float32)}})
    raw = (tmp_path / "checkpoint.pt").read_bytes()
    start = _pickle_start(raw)
    assert raw[start : start + 3] == b"\x80\x02}"  # PROTO 2, EMPTY_DICT
    opcode = bytearray(raw)
    opcode[start + 2] = 0xFF
    (tmp_path / "checkpoint.pt").write_bytes(bytes(opcode))
    assert raw.count(b"torch._utils") == 1
    (tmp_path / "checkpoint.prev.pt").write_bytes(raw.replace(b"torch._utils", b"tor9h._utils"))
    with pytest.raises(CheckpointError) as e:
        read_checkpoint_file(tmp_path / "checkpoint.pt")
    assert str(e.value) == f"{tmp_path / 'checkpoint.pt'}: corrupted (its pickle stream is damaged: Unsupported operand 255)"
    with pytest.raises(CheckpointError) as e:
        read_checkpoint_file(tmp_path / "checkpoint.prev.pt")
    assert str(e.value) == (
        f"{tmp_path / 'checkpoint.prev.pt'}: corrupted (its pickle stream is damaged: GLOBAL tor9h._utils._rebuild_tensor_v2)"
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"name": "x", "model": {"name": "mlp"}}))
    r = CliRunner().invoke(app, ["run", "--resume", str(tmp_path), "-q"])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and out.count("corrupted (its pickle stream") == 2 and "refused" not in out
    assert out.count("checkpoint.prev.pt: corrupted") == 1 and "WARNING" not in out
    assert f"start the run again with `fedselect run {tmp_path / 'config.yaml'} --out {tmp_path} --overwrite`" in out


def test_a_damaged_cifar_batch_is_called_corrupted(tmp_path):
    d = cifar_dir(tmp_path)
    batch = d / "data_batch_1"
    raw = batch.read_bytes()
    assert raw.count(b"numpy") >= 1
    batch.write_bytes(raw.replace(b"numpy", b"numpz", 1))
    with pytest.raises(DataFileError, match=r"data_batch_1: corrupted \(the pickle names numpz\.\S+, which does not exist\)"):
        load_dataset("cifar10", path=str(d))


def test_old_numpy_pickle_checkpoint_is_refused_with_a_hint(tmp_path):
    torch.save({"round": 1, "method": {"rows": np.zeros(3)}, "format_version": 2}, tmp_path / "checkpoint.pt")
    with pytest.raises(
        CheckpointError, match=r"asks for numpy.*before format 3 held NumPy pickles: start such a run again with --overwrite"
    ):
        read_checkpoint_file(tmp_path / "checkpoint.pt")


def test_saved_checkpoints_load_with_weights_only(tmp_path):
    save_checkpoint(
        tmp_path,
        {"round": 3, "method": {"rows": np.ones((2, 2), np.float32), "rng": np.random.default_rng(1).bit_generator.state}},
    )
    raw = torch.load(tmp_path / "checkpoint.pt", weights_only=True)  # plain data only
    assert raw["format_version"] == 3
    ck = load_checkpoint(tmp_path)
    assert ck["round"] == 3 and ck["method"]["rows"].dtype == np.float32 and ck["method"]["rows"].sum() == 4


def cifar_dir(tmp_path) -> Path:
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    for name in ("data_batch_1", "test_batch"):
        batch = {b"labels": [1, 2], b"data": np.zeros((2, 3072), np.uint8)}
        (d / name).write_bytes(pickle.dumps(batch, protocol=2))
    return d


def test_crafted_cifar_batch_is_refused_and_never_runs(tmp_path):
    d = cifar_dir(tmp_path)
    tr, _ = load_dataset("cifar10", path=str(d))
    assert tr.y.tolist() == [1, 2]
    marker = tmp_path / "ran.txt"
    evil = d / "data_batch_1"
    evil.write_bytes(pickle.dumps({b"labels": [1, 2], b"data": np.zeros((2, 3072), np.uint8), b"x": Crafted(marker)}, protocol=2))
    with pytest.raises(DataFileError) as e:
        load_dataset("cifar10", path=str(d))
    msg = str(e.value)
    assert msg.startswith(f"{evil}: refused to load: the pickle asks for ") and "touch_marker" in msg
    assert "nothing in the file was run" in msg and "crafted" not in msg.replace(str(tmp_path), "DIR")
    assert not marker.exists()
    # control: a plain unpickler would have run it
    pickle.loads(evil.read_bytes())
    assert marker.read_text() == "code ran"
