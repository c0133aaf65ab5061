import pytest
import torch

from fedselect.fl.aggregate import fedavg, partial_average, state_bytes


def test_fedavg_worked_example():
    out = fedavg([{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 4.0])}], [1, 3])
    torch.testing.assert_close(out["w"], torch.tensor([2.5, 3.5]))


def test_zero_total_weight_and_bad_weights_raise():
    s = [{"w": torch.ones(2)}, {"w": torch.zeros(2)}]
    with pytest.raises(ValueError, match="sum to 0"):
        fedavg(s, [0, 0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        fedavg(s, [1, float("nan")])
    with pytest.raises(ValueError, match="finite and >= 0"):
        fedavg(s, [1, -1])
    with pytest.raises(ValueError, match="at least one"):
        fedavg([], [])


def test_zero_sample_client_contributes_nothing():
    out = fedavg([{"w": torch.tensor([1.0])}, {"w": torch.tensor([100.0])}], [5, 0])
    assert out["w"].item() == 1.0


def test_float_parameter_and_int64_buffer_keep_dtypes():
    a = {"w": torch.tensor([1.0], dtype=torch.float32), "n": torch.tensor(3, dtype=torch.int64)}
    b = {"w": torch.tensor([2.0], dtype=torch.float32), "n": torch.tensor(7, dtype=torch.int64)}
    out = fedavg([a, b], [1, 1])
    assert out["w"].dtype == torch.float32 and out["n"].dtype == torch.int64
    assert out["w"].item() == 1.5 and out["n"].item() == 7  # integer buffers: max, not mean


def test_partial_average_only_base_layers():
    a = {"base.w": torch.tensor([0.0, 2.0]), "head.w": torch.tensor([1.0])}
    b = {"base.w": torch.tensor([2.0, 4.0]), "head.w": torch.tensor([9.0])}
    out = partial_average([a, b], [1, 1], ["base.w"])
    assert set(out) == {"base.w"}
    torch.testing.assert_close(out["base.w"], torch.tensor([1.0, 3.0]))
    with pytest.raises(ValueError, match="empty"):
        partial_average([a, b], [1, 1], [])


def test_state_bytes():
    s = {"w": torch.zeros(10), "n": torch.zeros((), dtype=torch.int64)}
    assert state_bytes(s) == 48 and state_bytes(s, ["w"]) == 40
