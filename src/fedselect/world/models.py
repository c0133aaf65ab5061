"""The papers' networks, registered in the model kind of :mod:`fedselect.registry`
(:data:`MODELS`: built-ins, users' own by :func:`register_model`, entry point or
``"package.module:Name"``). Knows nothing of federated learning.

Every model maps a float32 batch to logits of shape ``(batch, num_classes)``.

Sources: FLASH-RL Section IV-A (MNIST CNN, CIFAR-10 CNN, MobiAct GRU), CEFL's FD-CNN paragraph
(after He et al.), the budgeted-online paper's Phase 4 (MLP 10-25-25-C).
"""

from __future__ import annotations

from typing import Annotated, Callable

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fedselect.registry import MODELS


class TwoConvNet(nn.Module):
    """The shape shared by the papers' CNNs: conv1 -> ReLU -> maxpool2 -> conv2 -> ReLU ->
    maxpool2 -> flatten -> fc1 -> ReLU -> fc2 (logits). Subclasses only set the layer sizes;
    the parameter names ``conv1``, ``conv2``, ``fc1``, ``fc2`` are what base-layer selection
    (CEFL / FedPer) and checkpoints refer to."""

    def __init__(self, in_channels: int, channels: tuple[int, int], flat: int, hidden: int, num_classes: int, padding: int = 0):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels[0], 5, padding=padding)
        self.conv2 = nn.Conv2d(channels[0], channels[1], 5, padding=padding)
        self.fc1 = nn.Linear(flat, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.pool = nn.MaxPool2d(2)

    #: train and evaluate in channels-last memory format (:func:`prefers_channels_last`)
    channels_last = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # maxpool(relu(z)) == relu(maxpool(z)) exactly (ReLU is monotone, max picks an element),
        # and the gradients are identical too (the pooled-over argmax differs only among
        # elements <= 0, whose gradient ReLU zeroes); pooling first runs ReLU and its backward
        # on a quarter of the values (docs/performance.md: 1.2x faster training)
        x = torch.relu(self.pool(self.conv1(x)))
        x = torch.relu(self.pool(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc2(torch.relu(self.fc1(x)))


class MnistCNN(TwoConvNet):
    """FLASH-RL's MNIST CNN (FLASH-RL Sec. IV-A: two 5x5 convolutions of 20 and 50 channels).

    conv5x5(1->c1) -> ReLU -> maxpool2 -> conv5x5(c1->c2) -> ReLU -> maxpool2 ->
    fc(16 c2->hidden) -> ReLU -> fc(hidden->num_classes); by default c1, c2 = 20, 50 and hidden 500
    (fc 800->500).

    Input ``(batch, 1, 28, 28)``; output ``(batch, num_classes)``. 431,080 parameters for 10 classes;
    with ``channels=(32, 64), hidden=512``, the CNN of the FLASH-RL authors' code
    (``models/MNIST/CNN.py``, fc 1024->512), 582,026.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, channels: tuple[int, int] = (20, 50), hidden: int = 500):
        super().__init__(in_channels, tuple(channels), 16 * channels[1], hidden, num_classes)


class CifarCNN(TwoConvNet):
    """FLASH-RL's CIFAR-10 CNN (Section IV-A).

    conv5x5(3->6) -> ReLU -> maxpool2 -> conv5x5(6->16) -> ReLU -> maxpool2 ->
    fc(400->256) -> ReLU -> fc(256->num_classes).

    Input ``(batch, 3, 32, 32)``; output ``(batch, num_classes)``.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3):
        super().__init__(in_channels, (6, 16), 400, 256, num_classes)


class MLP(nn.Module):
    """Fully connected network with ReLU between layers.

    Default ``hidden=(25, 25)`` is the budgeted-online paper's IoT classifier (its Phase 4):
    ``in_features -> 25 -> 25 -> num_classes``. Any input shape is flattened, so
    ``(batch, *shape)`` with ``prod(shape) == in_features``.
    """

    def __init__(self, in_features: int, num_classes: int, hidden: tuple[int, ...] = (25, 25)):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


ModelFactory = Callable[..., nn.Module]


class NoModelOptions(BaseModel):
    """A model without options (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")


class MLPOptions(NoModelOptions):
    hidden: list[Annotated[int, Field(ge=1)]] = Field(
        [25, 25], min_length=1, description="hidden layer widths (budgeted-online paper: 25, 25)"
    )


class TwoConvOptions(NoModelOptions):
    """Layer sizes of a :class:`TwoConvNet` (``model.options``); subclasses set the paper's defaults."""

    channels: list[Annotated[int, Field(ge=1)]] = Field(
        [20, 50], min_length=2, max_length=2, description="output channels of conv1 and conv2"
    )
    hidden: int = Field(500, ge=1, description="units of fc1")


class MnistCNNOptions(TwoConvOptions):
    """``mnist_cnn``: FLASH-RL Sec. IV-A's 20 and 50 channels, fc1 of 500 (the authors' code: [32, 64], 512)."""


class FDCNNOptions(TwoConvOptions):
    """``fd_cnn``: our 32 and 64 filters (CEFL Sec. IV's text says 3 and 32: ``channels: [3, 32]``), fc1 of 512."""

    channels: list[Annotated[int, Field(ge=1)]] = Field(
        [32, 64], min_length=2, max_length=2, description="filters of conv1 and conv2 (CEFL Sec. IV's text: 3 and 32)"
    )
    hidden: int = Field(512, ge=1, description="units of fc1 (CEFL Sec. IV: 512)")


class GRUOptions(NoModelOptions):
    hidden: int = Field(256, ge=1, description="GRU hidden units per layer (FLASH-RL: 256)")
    layers: int = Field(2, ge=1, description="stacked GRU layers (FLASH-RL: 2)")


def register_model(name: str, options: type[BaseModel] | None = None):
    """Decorator registering a model factory under ``name`` (``model: {name: NAME}`` in a config).

    The factory is a function or an ``nn.Module`` subclass called as
    ``factory(input_shape, num_classes, **options)`` and returning the model: ``input_shape`` is
    one input without the batch dimension (a tuple of ints, the data set's
    :attr:`fedselect.world.data.datasets.ArrayDataset.input_shape`, e.g. ``(1, 28, 28)``), the model
    maps a float32 batch ``(batch, *input_shape)`` to logits ``(batch, num_classes)``. Its initial
    weights do not matter: fedselect re-draws every parameter from the experiment's seeded
    generator (:func:`reset_parameters`), so no global RNG is read.

    Args:
        name: the config name (no ``:``).
        options: pydantic model of ``model.options`` (set as the factory's ``Options``); None:
            the factory's ``Options`` attribute if it has one, else its keyword parameters after
            ``input_shape`` and ``num_classes`` (with their defaults).

    Raises:
        ValueError: a name with ``:`` or already taken by another factory.
    """

    def deco(fn: ModelFactory) -> ModelFactory:
        if options is not None:
            fn.Options = options
        return MODELS.add(name, fn)

    return deco


@register_model("mnist_cnn", MnistCNNOptions)
def _mnist_cnn(
    input_shape: tuple[int, ...], num_classes: int, channels: tuple[int, int] = (20, 50), hidden: int = 500, **kw
) -> nn.Module:
    """FLASH-RL's MNIST CNN (Section IV-A: two 5x5 convolutions of 20 and 50 channels, each with 2x2
    max pooling), then fc 800-500-classes; inputs (1, 28, 28)."""
    if tuple(input_shape[-2:]) != (28, 28):
        raise ValueError(f"model 'mnist_cnn' needs 28x28 inputs, got shape {tuple(input_shape)}")
    return MnistCNN(num_classes, input_shape[0] if len(input_shape) == 3 else 1, tuple(channels), int(hidden))


@register_model("cifar_cnn", NoModelOptions)
def _cifar_cnn(input_shape: tuple[int, ...], num_classes: int, **kw) -> nn.Module:
    """FLASH-RL's CIFAR-10 CNN (Section IV-A: two 5x5 convolutions of 6 and 16 channels, each with 2x2
    max pooling), then fc 400-256-classes; inputs (3, 32, 32)."""
    if tuple(input_shape) != (3, 32, 32):
        raise ValueError(f"model 'cifar_cnn' needs (3, 32, 32) inputs, got {tuple(input_shape)}")
    return CifarCNN(num_classes)


@register_model("mlp", MLPOptions)
def _mlp(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (25, 25), **kw) -> nn.Module:
    """Fully connected ReLU network on the flattened input (default: the budgeted-online paper's IoT
    classifier, layers of 25 neurons, its Phase 4); any input shape."""
    n = 1
    for s in input_shape:
        n *= int(s)
    return MLP(n, num_classes, tuple(hidden))


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, generator: torch.Generator | None = None, **kwargs
) -> nn.Module:
    """Build model ``name`` (a registered name or ``"package.module:Name"``) for inputs of
    ``input_shape`` (no batch dimension).

    Initial weights come from ``generator`` (a seeded ``torch.Generator``) so that no global
    RNG is touched: every parameter is re-drawn with PyTorch's default init rule but from
    the given generator.

    Raises:
        ValueError: unknown model name (lists the known ones), a factory that does not return
            an ``nn.Module``, or a shape the model cannot take.
    """
    model = MODELS.get(name)(tuple(input_shape), int(num_classes), **kwargs)
    if not isinstance(model, nn.Module):
        raise ValueError(f"model {name!r} returned {type(model).__name__}, not a torch.nn.Module")
    if generator is not None:
        reset_parameters(model, generator)
    return model


@torch.no_grad()
def reset_parameters(model: nn.Module, generator: torch.Generator) -> None:
    """Re-initialise every parameter from ``generator`` (uniform(-1/sqrt(fan_in), +) like
    PyTorch's default for Linear/Conv/GRU), leaving the global torch RNG untouched."""
    for module in model.modules():
        for pname, p in module.named_parameters(recurse=False):
            if p.dim() >= 2:
                fan_in = p[0].numel()
            elif isinstance(module, (nn.Linear,)) or pname.startswith("bias"):
                w = getattr(module, "weight", None)
                fan_in = w[0].numel() if w is not None and w.dim() >= 2 else max(p.numel(), 1)
            else:
                fan_in = max(p.numel(), 1)
            if isinstance(module, (nn.GRU, nn.LSTM, nn.RNN)):
                fan_in = module.hidden_size
            if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)):
                p.fill_(1.0 if pname == "weight" else 0.0)
                continue
            bound = 1.0 / float(fan_in) ** 0.5
            p.copy_(torch.rand(p.shape, generator=generator, dtype=p.dtype) * 2 * bound - bound)


def prefers_channels_last(model: nn.Module) -> bool:
    """True when ``model`` trains faster in ``torch.channels_last`` memory format (the papers'
    CNNs: measured 1.5-2x per client epoch on CPU, docs/performance.md). Channels-last changes
    float results in the last bits (other convolution kernels), so callers opt in explicitly
    (:class:`fedselect.fl.local.pool.ClientTrainer` does by default)."""
    return bool(getattr(model, "channels_last", False))


def count_parameters(model: nn.Module, names: list[str] | None = None) -> int:
    """Number of scalar parameters (optionally only those whose name is in ``names``)."""
    return sum(p.numel() for n, p in model.named_parameters() if names is None or n in names)


class GRUClassifier(nn.Module):
    """FLASH-RL's MobiAct GRU (Section IV-A): a 2-layer GRU with 256 hidden units; the last time
    step's hidden state -> linear -> classes.

    Input ``(batch, T, channels)`` (batch first; IMU windows have 6 channels); output
    ``(batch, num_classes)``. For 6 channels, 256 hidden, 2 layers and 2 classes:
    3*(6*256 + 256*256 + 2*256) + 3*(2*256*256 + 2*256) + 256*2 + 2 = 598,018 parameters.
    Initialisation: :func:`reset_parameters` draws every GRU weight and bias from
    U(-1/sqrt(hidden), 1/sqrt(hidden)), PyTorch's own GRU rule.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 256, layers: int = 2):
        super().__init__()
        self.gru = nn.GRU(in_channels, hidden, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.fc(out[:, -1])


class FDCNN(TwoConvNet):
    """CEFL's FD-CNN (CEFL Section IV after He et al.): input ``(batch, 3, 20, 20)`` RGB bitmaps;
    conv5x5 'same' 3->c1, ReLU, maxpool2; conv5x5 'same' c1->c2, ReLU, maxpool2; fc 25 c2->hidden,
    ReLU; fc hidden->num_classes (logits; the softmax is in the loss). By default c1, c2 = 32, 64
    and hidden 512 (fc 1600->512): 877,512 parameters for 8 classes (2,432 + 51,264 + 819,712 +
    4,104). CEFL's text gives 3 and 32 filters (``channels=(3, 32)``: fc 800->512, 416,876
    parameters for 8 classes). The convolutional layers ``conv1``, ``conv2`` are CEFL's base layers
    (those before the first fully connected one); ``fc1``, ``fc2`` are personalised.
    """

    def __init__(self, num_classes: int = 8, in_channels: int = 3, channels: tuple[int, int] = (32, 64), hidden: int = 512):
        super().__init__(in_channels, tuple(channels), 25 * channels[1], hidden, num_classes, padding=2)


@register_model("gru", GRUOptions)
def _gru(input_shape: tuple[int, ...], num_classes: int, hidden: int = 256, layers: int = 2, **kw) -> nn.Module:
    """Stacked GRU over a sequence, the last step's hidden state -> linear (the MobiAct model); inputs
    (T, channels)."""
    if len(input_shape) != 2:
        raise ValueError(f"model 'gru' needs sequence inputs of shape (T, channels), got {tuple(input_shape)}")
    return GRUClassifier(int(input_shape[-1]), num_classes, int(hidden), int(layers))


@register_model("fd_cnn", FDCNNOptions)
def _fd_cnn(
    input_shape: tuple[int, ...], num_classes: int, channels: tuple[int, int] = (32, 64), hidden: int = 512, **kw
) -> nn.Module:
    """CEFL's FD-CNN (Section IV, after He et al.), as built here: two 5x5 'same' convolutions of 32
    and 64 channels with 2x2 max pooling, fc 1600-512-classes; inputs (3, 20, 20) bitmaps."""
    if tuple(input_shape) != (3, 20, 20):
        raise ValueError(f"model 'fd_cnn' needs (3, 20, 20) bitmaps, got {tuple(input_shape)}")
    return FDCNN(num_classes, 3, tuple(channels), int(hidden))
