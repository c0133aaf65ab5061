"""The built-in partition schemes: plug-ins of the one registry (``data.partition.scheme``).

A scheme divides the training set's rows over the N clients. Each is a small class, a subclass of
:class:`~fedselect.world.data.partition_schemes.base.Partitioner` registered with
:func:`~fedselect.world.data.partition_schemes.base.register_partitioner`: parameters in
``__init__``, one method ``split(labels, num_clients, rng, groups=None) -> list[np.ndarray]``
returning one int64 index array per client. Partitions are disjoint unless a scheme says
otherwise (fat/thin clients sample with replacement). Impossible requests raise ``ValueError``
with the numbers *before* any sampling; randomised schemes retry a bounded number of times.

* :mod:`~fedselect.world.data.partition_schemes.label` -- label-based non-IID schemes: ``iid``,
  ``dirichlet`` (FedLab's hetero Dirichlet, FLASH-RL Section IV-A), ``shards``, ``label_skew``;
* :mod:`~fedselect.world.data.partition_schemes.client_dirichlet` -- ``client_dirichlet``, every
  client's size first, then its Dirichlet class mix (the scheme for large N);
* :mod:`~fedselect.world.data.partition_schemes.fat_thin` -- ``fat_thin``, the budgeted-online
  paper's fat and thin clients;
* :mod:`~fedselect.world.data.partition_schemes.volunteer` -- ``volunteer`` and
  ``volunteer_label_skew``, one client per subject of sensor data (FLASH-RL Section IV-A).

The registry (:data:`fedselect.registry.PARTITIONERS`) imports every module of this package on
its first lookup; a scheme is made by name with :func:`fedselect.world.data.partition.make_partitioner`.
"""
