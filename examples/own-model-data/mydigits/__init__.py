"""A user's own model and data set for fedselect, outside the fedselect package: a small CNN
(:mod:`mydigits.models`) and a loader of 8x8 handwritten digits from a CSV file
(:mod:`mydigits.data`), named in a config by module path (``compare.yaml``)."""
