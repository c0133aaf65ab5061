"""The world a federation lives in: data sets and their partitions over clients
(:mod:`fedselect.world.data`), models (:mod:`fedselect.world.models`), device and network
profiles and their per-round draws (:mod:`fedselect.world.system`, named fleets in
:mod:`fedselect.world.profiles`, FedScale converters in :mod:`fedselect.world.fedscale`), and
the federation built from a config (:mod:`fedselect.world.federation`). Knows no round."""
