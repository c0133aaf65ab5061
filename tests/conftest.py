import atexit
import os
import shutil
import tempfile

import pytest
import torch

from support.tiny import tiny_doc

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# tests train in this process unless a test asks for worker processes (results are identical
# for any number of workers: tests/fl/test_pool.py); starting pools in every test would only cost time
os.environ.setdefault("FEDSELECT_WORKERS", "0")
# Flower (the optional extra; its tests and their subprocesses): no telemetry, no update check,
# and its id file in a temporary FLWR_HOME instead of $HOME
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
if "FLWR_HOME" not in os.environ:
    os.environ["FLWR_HOME"] = tempfile.mkdtemp(prefix="fedselect-test-flwr-home-")
    atexit.register(shutil.rmtree, os.environ["FLWR_HOME"], True)


@pytest.fixture
def tiny_cfg_doc():
    """A fast FedAvg experiment on the embedded real MNIST (few clients, few rounds): the tiny
    experiment of tests/support/tiny.py (8 clients, 2 per round, 2 rounds, seed 3)."""
    return tiny_doc()
