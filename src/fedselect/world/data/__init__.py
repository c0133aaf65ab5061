"""Data: in-memory data sets, their loaders, partitions over clients, sensor windows/bitmaps and
IoT flow features. Look names up through :mod:`fedselect.world.data.catalog` (``load_dataset``,
``make_partitioner``)."""

from fedselect.world.data.datasets import DATASETS, ArrayDataset, DatasetNotFoundError, register_dataset

__all__ = ["ArrayDataset", "DATASETS", "DatasetNotFoundError", "register_dataset"]
