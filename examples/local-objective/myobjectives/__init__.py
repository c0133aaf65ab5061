"""A user's own algorithm with its own local objective, outside fedselect: FedDyn
(``myobjectives.feddyn:FedDyn``)."""
