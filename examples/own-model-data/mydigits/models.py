"""A small CNN for small images, named in a config as ``model: {name: "mydigits.models:SmallCNN"}``."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class SmallCNN(nn.Module):
    """Two 3x3 convolutions with ReLU and 2x2 max pooling, then two fully connected layers.

    conv3x3(C -> channels, padding 1) -> ReLU -> maxpool2 -> conv3x3(channels -> 2 channels,
    padding 1) -> ReLU -> maxpool2 -> fc(2 channels x H/4 x W/4 -> hidden) -> ReLU ->
    fc(hidden -> num_classes). Input ``(batch, C, H, W)`` float32, H and W multiples of 4;
    output logits ``(batch, num_classes)``. For (1, 8, 8) digits with 8 channels and 32 hidden
    units: 80 + 1,168 + 2,080 + 330 = 3,658 parameters.

    fedselect calls ``SmallCNN(input_shape, num_classes, **model.options)`` and re-draws every
    parameter from the experiment's seeded generator, so the initialisation here is irrelevant.
    """

    class Options(BaseModel):  # model.options, checked before anything runs
        model_config = ConfigDict(extra="forbid")
        channels: int = Field(8, ge=1, description="channels of the first convolution (the second has twice as many)")
        hidden: int = Field(32, ge=1, description="units of the first fully connected layer")

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, channels: int = 8, hidden: int = 32):
        super().__init__()
        if len(input_shape) != 3 or input_shape[1] % 4 or input_shape[2] % 4:
            raise ValueError(f"SmallCNN needs (C, H, W) inputs with H and W multiples of 4, got {tuple(input_shape)}")
        c, h, w = input_shape
        self.conv1 = nn.Conv2d(c, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.fc1 = nn.Linear(2 * channels * (h // 4) * (w // 4), hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))
