"""fedselect on Flower (flwr 1.42, Message API): a ClientApp for fedselect's models and
partitions (:mod:`fedselect.flower.client_app`).

Flower is the optional extra ``fedselect[flower]`` (requirements-flower.txt); nothing here is
imported by the rest of fedselect. See docs/flower.md for the node settings, the messages a
node answers and how to run it in Flower's simulation engine or on real SuperNodes.
"""
