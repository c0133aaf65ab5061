"""anyapp: the model and the data (Flower's quickstart-pytorch ``task.py``, made small and offline).

Every partition holds a synthetic, seeded share of a 4-class problem in 16 features (Gaussian
blobs), with its own label skew, so the example needs no download.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES, NUM_FEATURES = 4, 16


class Net(nn.Module):
    """A small MLP (16 -> 32 -> 4)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(NUM_FEATURES, 32)
        self.fc2 = nn.Linear(32, NUM_CLASSES)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _blobs(rng: np.random.Generator, n: int, label_p: np.ndarray) -> TensorDataset:
    centres = np.random.default_rng(0).normal(0.0, 2.0, size=(NUM_CLASSES, NUM_FEATURES))
    y = rng.choice(NUM_CLASSES, size=n, p=label_p)
    x = centres[y] + rng.normal(0.0, 1.5, size=(n, NUM_FEATURES))
    return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))


def load_data(partition_id: int, num_partitions: int, batch_size: int = 16):
    """(trainloader, valloader) of partition ``partition_id``: 40 to 100 samples, 80 % for training."""
    rng = np.random.default_rng(1000 + partition_id)
    n = 40 + 15 * (partition_id % 5)
    label_p = rng.dirichlet(np.full(NUM_CLASSES, 0.5))
    data = _blobs(rng, n, label_p)
    cut = int(0.8 * n)
    train = TensorDataset(*(t[:cut] for t in data.tensors))
    val = TensorDataset(*(t[cut:] for t in data.tensors))
    return DataLoader(train, batch_size=batch_size, shuffle=True), DataLoader(val, batch_size=batch_size)


def load_centralized_dataset() -> DataLoader:
    """The server's test set: 400 samples, balanced classes."""
    return DataLoader(_blobs(np.random.default_rng(7), 400, np.full(NUM_CLASSES, 1 / NUM_CLASSES)), batch_size=64)


def train(net: Net, trainloader: DataLoader, epochs: int, lr: float, device: str) -> float:
    """Train ``net`` for ``epochs`` epochs; returns the mean training loss."""
    net.to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    running, batches = 0.0, 0
    for _ in range(epochs):
        for x, y in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            running += loss.item()
            batches += 1
    return running / max(1, batches)


def test(net: Net, testloader: DataLoader, device: str) -> tuple[float, float]:
    """(mean loss, accuracy) of ``net`` on ``testloader``."""
    net.to(device)
    criterion = nn.CrossEntropyLoss()
    correct, loss, n = 0, 0.0, 0
    net.eval()
    with torch.no_grad():
        for x, y in testloader:
            out = net(x.to(device))
            loss += criterion(out, y.to(device)).item() * len(y)
            correct += (out.argmax(1) == y.to(device)).sum().item()
            n += len(y)
    return loss / max(1, n), correct / max(1, n)
