"""Helpers shared by the tests (not tests themselves): the tiny experiment, hand-made runs and
data files, the registry's cases and an in-process Flower grid. ``tests/`` is on the import path
(``pythonpath`` in pyproject.toml), so a test imports them as ``support.<module>``."""
