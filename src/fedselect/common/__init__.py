"""The ground floor, imported by every layer and importing no other part of fedselect:
one random generator per component (:mod:`fedselect.common.seeding`), files written
atomically and read back tolerantly (:mod:`fedselect.common.files`) and what the C library's
heap keeps of freed memory (:mod:`fedselect.common.memory`)."""
