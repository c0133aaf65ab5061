"""The ground floor, imported by every layer and importing no other part of fedselect:
one random generator per component (:mod:`fedselect.common.seeding`) and files written
atomically and read back tolerantly (:mod:`fedselect.common.files`)."""
