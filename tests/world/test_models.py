import pytest
import torch
from torch import nn

from fedselect.common.seeding import torch_rng
from fedselect.world.models import build_model, count_parameters


@pytest.mark.parametrize(
    "name,shape,params",
    [
        # conv 1*20*25+20, conv 20*50*25+50, fc 800*500+500, fc 500*10+10
        ("mnist_cnn", (1, 28, 28), 520 + 25_050 + 400_500 + 5_010),
        # conv 3*6*25+6, conv 6*16*25+16, fc 400*256+256, fc 256*10+10
        ("cifar_cnn", (3, 32, 32), 456 + 2_416 + 102_656 + 2_570),
        # 784*25+25, 25*25+25, 25*10+10
        ("mlp", (1, 28, 28), 19_625 + 650 + 260),
    ],
)
def test_paper_models_shapes_and_sizes(name, shape, params):
    m = build_model(name, shape, 10)
    assert count_parameters(m) == params
    assert m(torch.zeros(4, *shape)).shape == (4, 10)


def test_seeded_init_is_reproducible():
    a = build_model("mnist_cnn", (1, 28, 28), 10, generator=torch_rng(1, "model-init"))
    b = build_model("mnist_cnn", (1, 28, 28), 10, generator=torch_rng(1, "model-init"))
    c = build_model("mnist_cnn", (1, 28, 28), 10, generator=torch_rng(2, "model-init"))
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert not torch.equal(a.state_dict()["conv1.weight"], c.state_dict()["conv1.weight"])


def test_wrong_input_shape_is_a_clear_error():
    with pytest.raises(ValueError, match="needs 28x28 inputs"):
        build_model("mnist_cnn", (3, 32, 32), 10)
    with pytest.raises(ValueError, match="unknown model 'resnet'"):
        build_model("resnet", (3, 32, 32), 10)


def test_two_conv_net_pools_before_relu_bit_identically():
    """TwoConvNet.forward runs maxpool before ReLU (faster); outputs and every gradient equal
    those of the papers' order conv -> ReLU -> maxpool exactly, in both memory formats."""
    from fedselect.common.seeding import torch_rng
    from fedselect.world.models import prefers_channels_last

    def papers_order(m, x):
        x = m.pool(torch.relu(m.conv1(x)))
        x = m.pool(torch.relu(m.conv2(x)))
        return m.fc2(torch.relu(m.fc1(torch.flatten(x, 1))))

    for name, shape in [("mnist_cnn", (1, 28, 28)), ("fd_cnn", (3, 20, 20))]:
        for fmt in (torch.contiguous_format, torch.channels_last):
            m = build_model(name, shape, 10, generator=torch_rng(0, "m")).to(memory_format=fmt)
            assert prefers_channels_last(m)
            x = torch.randn((16, *shape), generator=torch_rng(0, "x"))  # negative inputs: dead units and ties
            y = torch.arange(16) % 10
            grads = []
            for fwd in (m.forward, lambda x, m=m: papers_order(m, x)):
                m.zero_grad(set_to_none=True)
                out = fwd(x)
                nn.functional.cross_entropy(out, y).backward()
                grads.append((out.detach(), {k: p.grad.clone() for k, p in m.named_parameters()}))
            assert torch.equal(grads[0][0], grads[1][0])
            for k in grads[0][1]:
                assert torch.equal(grads[0][1][k], grads[1][1][k]), (name, fmt, k)
    assert not prefers_channels_last(build_model("mlp", (4,), 2))
