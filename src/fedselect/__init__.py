"""fedselect: client selection for federated learning over heterogeneous fleets.

Layers (arrows point down only)::

    cli, report -> runner -> methods -> fl -> (system, data, models)
"""

__version__ = "0.1.0"
