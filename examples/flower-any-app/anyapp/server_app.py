"""anyapp: a Flower ServerApp whose nodes are chosen by a fedselect selector: Flower's own FedAvg,
wrapped in fedselect's SelectionStrategy (Oort by default; the run config's ``selector``)."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from anyapp.task import initial_arrays, load_centralized_dataset, test
from fedselect.flower import SelectionStrategy

# Create ServerApp
app = ServerApp()


def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Evaluate the global model on the server's test set."""
    x, y = load_centralized_dataset()
    loss, accuracy = test(arrays.to_numpy_ndarrays(), x, y)
    return MetricRecord({"accuracy": accuracy, "loss": loss})


def federate(grid: Grid, selector: str = "oort", num_rounds: int = 3, lr: float = 0.1, **selection) -> tuple:
    """Run ``num_rounds`` rounds of FedAvg on ``grid`` with ``selector`` choosing 2 of 5 nodes
    (``fraction_train`` 0.4); ``selection`` goes to SelectionStrategy (options, run_dir, ...).
    Returns (the strategy, Flower's Result)."""
    strategy = SelectionStrategy(FedAvg(fraction_train=0.4, fraction_evaluate=0.0), selector=selector, **selection)
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(initial_arrays()),
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        timeout=120.0,
        evaluate_fn=global_evaluate,
    )
    return strategy, result


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""
    run_dir = str(context.run_config.get("run-dir", "")) or None
    _, result = federate(
        grid,
        selector=str(context.run_config.get("selector", "oort")),
        num_rounds=int(context.run_config.get("num-server-rounds", 3)),
        lr=float(context.run_config.get("lr", 0.1)),
        run_dir=run_dir,
    )
    # Save final model to disk
    print("\nSaving final model to disk...")
    np.savez("final_model.npz", *result.arrays.to_numpy_ndarrays())
