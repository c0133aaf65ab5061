"""Run every benchmark in this folder: `python benchmarks/run_all.py [--quick] [--only NAME]`.

Each benchmark is a script `bench_*.py` (or a named script listed below) exposing
``main(quick: bool) -> dict``; results are printed and written to
``benchmarks/results/<name>.json``. Figures go into the issue notes, not into tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

from fedselect.common.files import dumps_json

HERE = Path(__file__).resolve().parent


#: benchmarks named otherwise than bench_*.py
NAMED = ("scale.py", "startup.py", "pool_rule.py")


def discover() -> list[Path]:
    return sorted([*HERE.glob("bench_*.py"), *(HERE / n for n in NAMED)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes (minutes, not hours)")
    ap.add_argument("--only", help="run only benchmarks whose file name contains this")
    args = ap.parse_args()
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    for path in discover():
        if args.only and args.only not in path.name:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        t0 = time.perf_counter()
        print(f"== {path.stem}", flush=True)
        res = mod.main(quick=args.quick)
        res["bench_wall_s"] = time.perf_counter() - t0
        text = dumps_json(res, indent=2, default=str)  # strict JSON: non-finite numbers as null
        (out / f"{path.stem}.json").write_text(text)
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
