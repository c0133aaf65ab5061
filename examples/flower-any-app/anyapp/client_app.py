"""anyapp: a Flower ClientApp written the way Flower's quickstart and app templates write one.
Nothing in it knows fedselect: the server's SelectionStrategy reads only the ``num-examples``
and the losses it reports, and measures how long it takes to answer.

To show the selectors learning from measured speed, the partitions named in the run config's
``slow-partitions`` (default "0") play slow devices: they sleep ``slow-seconds`` (default 1.0)
before every reply.
"""

import time

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from anyapp.task import load_data
from anyapp.task import test as test_fn
from anyapp.task import train as train_fn

# Flower ClientApp
app = ClientApp()


def slow_device(context: Context) -> None:
    """Sleep ``slow-seconds`` on the partitions listed in ``slow-partitions`` (a slow device)."""
    slow = str(context.run_config.get("slow-partitions", "0"))
    ids = {int(p) for p in slow.replace(",", " ").split()}
    if int(context.node_config["partition-id"]) in ids:
        time.sleep(float(context.run_config.get("slow-seconds", 1.0)))


@app.train()
def train(msg: Message, context: Context):
    """Train the model on local data."""

    # Get the model parameters from the message
    arrays = msg.content["arrays"].to_numpy_ndarrays()

    # Load the data
    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    (x_train, y_train), _ = load_data(partition_id, num_partitions)

    # Call the training function
    arrays, train_loss = train_fn(
        arrays,
        x_train,
        y_train,
        int(context.run_config.get("local-epochs", 1)),
        msg.content["config"]["lr"],
        seed=int(msg.content["config"]["server-round"]),
    )
    slow_device(context)

    # Construct and return reply Message
    model_record = ArrayRecord(arrays)
    metrics = {
        "train_loss": train_loss,
        "num-examples": len(y_train),
    }
    metric_record = MetricRecord(metrics)
    content = RecordDict({"arrays": model_record, "metrics": metric_record})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    """Evaluate the model on local data."""

    # Get the model parameters from the message
    arrays = msg.content["arrays"].to_numpy_ndarrays()

    # Load the data
    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    _, (x_val, y_val) = load_data(partition_id, num_partitions)

    # Call the evaluation function
    eval_loss, eval_acc = test_fn(arrays, x_val, y_val)
    slow_device(context)

    # Construct and return reply Message
    metrics = {
        "eval_loss": eval_loss,
        "eval_acc": eval_acc,
        "num-examples": len(y_val),
    }
    metric_record = MetricRecord(metrics)
    content = RecordDict({"metrics": metric_record})
    return Message(content=content, reply_to=msg)
