"""Write data/digits.csv (or the path given) for compare.yaml: scikit-learn's bundled copy of
the UCI handwritten digits, one row per digit (label, 64 pixels). Run from the repository root:

    python examples/own-model-data/make_csv.py [PATH]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mydigits.data import write_digits_csv  # noqa: E402

if __name__ == "__main__":
    print(f"wrote {write_digits_csv(sys.argv[1] if len(sys.argv) > 1 else 'data/digits.csv')}")
