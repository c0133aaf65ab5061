"""The experiment layer: one run of a config and seed. Resolve the config once
(:mod:`fedselect.experiment.resolve`), build the run's parts (:mod:`~fedselect.experiment.simulation`),
play it on an engine (:mod:`~fedselect.experiment.run`), and keep its files: metrics
(:mod:`~fedselect.experiment.metrics`), run files (:mod:`~fedselect.experiment.runfiles`),
checkpoints (:mod:`~fedselect.experiment.checkpoint`), provenance (:mod:`~fedselect.experiment.inputs`)
and TensorBoard curves (:mod:`~fedselect.experiment.tblog`)."""
