"""Data: in-memory data sets, their loaders, partitions over clients, sensor windows/bitmaps and
IoT flow features. Look names up through :mod:`fedselect.data.catalog` (``load_dataset``,
``make_partitioner``)."""

from fedselect.data.datasets import DATASETS, ArrayDataset, DatasetNotFoundError, register_dataset

__all__ = ["ArrayDataset", "DATASETS", "DatasetNotFoundError", "register_dataset"]
