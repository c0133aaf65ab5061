"""Data: datasets (embedded sets and loaders for on-disk formats), partitions and sensor
preprocessing. Knows nothing of federated learning."""

from fedselect.data.datasets import ArrayDataset, DATASETS, load_dataset, register_dataset

__all__ = ["ArrayDataset", "DATASETS", "load_dataset", "register_dataset"]
