"""The parts of ``fedselect reproduce`` (:mod:`fedselect.repro.reproduce` is the public face): the
manifest and verdicts, the machine record, the three kinds of entry and the document."""
