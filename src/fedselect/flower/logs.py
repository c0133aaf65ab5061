"""Flower's console lines in processes fedselect runs: plain text off a terminal, and without
the notices that concern fedselect's own use of Flower rather than the user's experiment.

* :func:`quiet_flower_logs` (called when the ClientApp or the ServerApp module is imported, so in
  every Ray actor, ``flwr-clientapp`` and ``flwr-serverapp`` process): Flower's console handler
  writes ANSI colour codes only to a terminal, and :class:`FlowerNoise` is filtered out.
* :func:`flower_console` (around Flower's simulation engine in ``fedselect run/compare --engine
  flower``): Flower's lines reach the console the way fedselect's own do, once, through the
  logging root, and Ray prefixes the actors' lines without colour codes off a terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Iterator

__all__ = ["FlowerNoise", "quiet_flower_logs", "flower_console"]


class FlowerNoise(logging.Filter):
    """Drops Flower's deprecation notices (about the API fedselect calls: ``run_simulation``)
    and the notice every simulation actor writes at its normal end ("Manually terminating
    ClientAppActor")."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return "DEPRECATED FEATURE" not in msg and not msg.startswith("Manually terminating")


def _consoles(logger: logging.Logger) -> list[logging.Handler]:
    return [h for h in logger.handlers if type(h).__name__ == "ConsoleHandler"]


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def quiet_flower_logs() -> None:
    """In this process: Flower's console handler colours its lines only when it writes to a
    terminal, and :class:`FlowerNoise` is filtered from Flower's logger (once)."""
    flwr_log = logging.getLogger("flwr")
    for h in _consoles(flwr_log):
        h.colored = _is_terminal(getattr(h, "stream", None))
    if not any(isinstance(f, FlowerNoise) for f in flwr_log.filters):
        flwr_log.addFilter(FlowerNoise())


@contextlib.contextmanager
def flower_console() -> Iterator[None]:
    """While fedselect drives Flower in this process: Flower's log records reach the console
    the way fedselect's own do, through the logging root (in the command line: warnings and
    errors, plain ``WARNING flwr: ...`` lines, once), instead of also through Flower's own
    console handler, which repeats every warning the root shows; :class:`FlowerNoise` is
    dropped; off a terminal Ray prefixes the actors' lines without colour codes
    (``RAY_COLOR_PREFIX=0``). Restored on exit."""
    flwr_log = logging.getLogger("flwr")
    consoles = _consoles(flwr_log)
    drop = FlowerNoise()
    for h in consoles:
        flwr_log.removeHandler(h)
    flwr_log.addFilter(drop)
    ray_colour = os.environ.get("RAY_COLOR_PREFIX")
    if not (_is_terminal(sys.stdout) and _is_terminal(sys.stderr)):
        os.environ["RAY_COLOR_PREFIX"] = "0"
    try:
        yield
    finally:
        if ray_colour is None:
            os.environ.pop("RAY_COLOR_PREFIX", None)
        else:
            os.environ["RAY_COLOR_PREFIX"] = ray_colour
        flwr_log.removeFilter(drop)
        for h in consoles:
            flwr_log.addHandler(h)
