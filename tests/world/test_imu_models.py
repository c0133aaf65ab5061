"""GRU (FLASH-RL Section IV-A) and FD-CNN (CEFL) shapes, sizes and seeded initialisation."""

import pytest
import torch

from fedselect.world.models import build_model, count_parameters


def test_gru_shape_and_size():
    g = torch.Generator().manual_seed(0)
    m = build_model("gru", (50, 6), 2, generator=g)
    assert m(torch.zeros(4, 50, 6)).shape == (4, 2)
    # 2 layers x 256: 3*(6*256 + 256*256 + 2*256) + 3*(2*256*256 + 2*256) + 256*2 + 2
    assert count_parameters(m) == 202_752 + 394_752 + 514 == 598_018
    assert m.gru.num_layers == 2 and m.gru.hidden_size == 256 and m.gru.batch_first
    # PyTorch's GRU rule U(-1/sqrt(256), 1/sqrt(256)), drawn from the given generator
    bound = 1 / 16
    for name, p in m.gru.named_parameters():
        assert p.abs().max() <= bound and p.abs().max() > 0.9 * bound, name
    m2 = build_model("gru", (50, 6), 2, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))
    # logits = linear(last time step of the top GRU layer)
    x = torch.randn(3, 50, 6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out, _ = m.gru(x)
        torch.testing.assert_close(m(x), m.fc(out[:, -1]))
    with pytest.raises(ValueError, match="gru"):
        build_model("gru", (3, 20, 20), 2)


def test_fd_cnn_shape_and_size():
    m = build_model("fd_cnn", (3, 20, 20), 8, generator=torch.Generator().manual_seed(0))
    assert m(torch.zeros(5, 3, 20, 20)).shape == (5, 8)
    assert count_parameters(m) == 2_432 + 51_264 + 819_712 + 4_104 == 877_512
    assert count_parameters(m, ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"]) == 53_696
    assert build_model("fd_cnn", (3, 20, 20), 7)(torch.zeros(1, 3, 20, 20)).shape == (1, 7)
    with pytest.raises(ValueError, match="20, 20"):
        build_model("fd_cnn", (3, 32, 32), 8)
