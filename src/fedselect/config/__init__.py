"""The experiment's configuration: the schema (:mod:`fedselect.config.schema`, with its fleet
sections in :mod:`fedselect.config.fleet`), the named presets (:mod:`fedselect.config.presets`),
the methods a comparison or sweep runs (:mod:`fedselect.config.contenders`) and the embedded
default configs (``defaults/*.yaml``). Imports only the ground floor (:mod:`fedselect.common`,
:mod:`fedselect.registry`)."""
