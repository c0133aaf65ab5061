"""Run the app in Flower's simulation engine, 5 SuperNodes (partition 0 a slow device):

    python examples/flower-any-app/run.py [--selector oort] [--rounds 3] [--run-dir runs/anyapp]

(``flwr run examples/flower-any-app`` runs the same app through Flower's CLI; README.md.)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--selector", default="oort", help="a fedselect selector that works in any Flower app (default oort)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--run-dir", default=None, help="where to write metrics.csv, clients.csv, summary.json")
    args = p.parse_args()
    # the simulation engine's workers import the app from here
    sys.path.insert(0, str(HERE))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)

    from anyapp.client_app import app as client_app
    from anyapp.server_app import federate
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    server_app = ServerApp()

    @server_app.main()
    def _main(grid, context) -> None:
        strategy, _ = federate(grid, selector=args.selector, num_rounds=args.rounds, run_dir=args.run_dir)
        for row in strategy.rows:
            print(
                f"round {row['round']}: clients {row['selected']} accuracy {row['accuracy']:.3f} latency {row['round_latency_s']:.2f} s"
            )

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=args.nodes,
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": args.nodes}},
    )


if __name__ == "__main__":
    main()
