"""The options the commands share: ``--set`` items and the named options turned into dotted config
overrides, ``--seeds``, ``--workers``, the study backend (``--backend ray``), ``--resume``'s
refusals, ``--engine`` (its choices from the engine registry) and the help texts of these options.

Imports nothing heavy (``fedselect --help`` reads these): the study backends are imported when a
command runs.
"""

from __future__ import annotations

import click

from fedselect.cli import console as ui
from fedselect.registry import ENGINES


def parse_sets(sets: list[str] | None) -> dict:
    """``["train.lr=0.1", "data.options.path=/data/x"]`` -> dotted overrides (values parsed as YAML).

    Raises:
        ValueError: an item that is not KEY=VALUE, a value that is not YAML, or a key given twice.
    """
    import yaml

    out = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. --set train.lr=0.1")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ValueError(f"--set {item!r}: the value is not valid YAML ({e})") from None
        if key in out:
            raise ValueError(f"--set {key}: given twice ({key}={out[key]!r} and {item!r}); give it once")
        out[key] = parsed
    return out


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]`` for --seeds.

    Raises:
        ValueError: not distinct comma-separated integers >= 0 (or nothing given).
    """
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"--seeds {text!r}: expected distinct comma-separated integers >= 0, like 0,1,2")
    return seeds


def check_workers(n: int | None) -> int | None:
    """``--workers``: ``n`` as given (None: the config's ``train.workers``).

    Raises:
        ValueError: ``n`` < 0.
    """
    if n is not None and n < 0:
        raise ValueError(f"--workers must be >= 0 (0 = train the clients in this process), got {n}")
    return n


def backend_from_options(backend: str, address, cpus_per_run, ray_cpus, workers):
    """The study backend of ``--backend``, ``--address``, ``--cpus-per-run`` (default 1),
    ``--ray-cpus`` and ``--workers`` (:func:`fedselect.study.backends.make_backend`)."""
    from fedselect.study.backends import make_backend

    cpus = cpus_per_run if cpus_per_run is not None else 1
    return make_backend(backend, address=address, cpus_per_run=cpus, workers=check_workers(workers), num_cpus=ray_cpus)


def ray_note(runner_backend, address) -> None:
    """Say where the runs go when they are Ray tasks."""
    if runner_backend.name == "ray":
        ui.console.print(f"backend: Ray ({address or 'local instance'}), one task per run", highlight=False)


def refuse_with_resume(what: str, options: dict, tail: str = "") -> None:
    """--resume takes what it continues from its directory: any of ``options`` given is an error."""
    given = [n for n, v in options.items() if v is not None and v is not False and not (isinstance(v, (list, tuple)) and not v)]
    if given:
        raise ValueError(f"--resume {what}; it cannot be combined with {', '.join(given)}{tail}")


#: the named options and the config key each one sets (--log tensorboard: log.tensorboard)
FLAG_KEYS = {
    "--rounds": "rounds",
    "--seed": "seed",
    "--method": "method",
    "--selector": "selector.name",
    "--algorithm": "algorithm.name",
    "--device": "train.device",
    "--engine": "engine",
}


def option_overrides(rounds, seed, method, sets=None, selector=None, algorithm=None, device=None, engine=None, log=None) -> dict:
    """Dotted overrides from the command line: each named option is the key it stands for
    (:data:`FLAG_KEYS`; ``--log tensorboard`` is ``log.tensorboard: true``), with the ``--set``
    keys beside them; a key given by an option and by ``--set`` is refused. How ``method``,
    ``selector.name`` and ``algorithm.name`` switch components is :func:`fedselect.api.plan_run`'s.

    Raises:
        ValueError: a bad --set or --log, or a key given twice.
    """
    given = dict(zip(FLAG_KEYS, (rounds, seed, method, selector, algorithm, device, engine)))
    flags = {FLAG_KEYS[f]: v for f, v in given.items() if v is not None}
    for what in log or []:  # --log tensorboard is --set log.tensorboard=true
        if what != "tensorboard":
            raise ValueError(f"--log {what!r}: allowed: 'tensorboard'")
        flags["log.tensorboard"] = True
    out = parse_sets(sets)
    for key in flags:
        if key in out:
            flag = next((f for f, k in FLAG_KEYS.items() if k == key), "--log")
            raise ValueError(f"{flag} and --set {key}={out[key]!r} both set {key}; give it once")
    return {**flags, **out}


SET_HELP = "override a config key, e.g. --set train.lr=0.1 --set data.options.path=/data/MobiAct (repeatable; values are YAML; a key an option or another --set also gives is refused)"
SET_EVERY_RUN_HELP = "; sets the key in every run, over the methods' own values (not seed, name, method, selector, algorithm or their names: the methods say what runs; options are fine)"
WORKERS_HELP = "worker processes training the clients of a round side by side, one torch thread each (default: train.workers, else FEDSELECT_WORKERS, else the usable cores where the run's work repays starting them and none where it does not, docs/performance.md#start-up; 0 = in this process; more than the usable cores start only those); results are identical for any value"
DEVICE_HELP = "where clients train: auto (a GPU when one is available; default), cpu, cuda or cuda:N (sets train.device)"
LOG_HELP = "live logs: --log tensorboard writes TensorBoard event files into <run dir>/tb every round (sets log.tensorboard; needs the extra fedselect[tensorboard])"


def default_first(names: list[str]) -> list[str]:
    """Engine names with the default engine, ``simulator``, first."""
    return sorted(names, key=lambda n: (n != "simulator", n))


ENGINE_HELP = (
    f"where the rounds run (sets engine): {', '.join(default_first(ENGINES.builtin_names()))} (simulator: this process and its "
    "worker pool, the default; flower: Flower's simulation engine, one node per client, needs the extra "
    "fedselect[flower]), an engine of the entry-point group fedselect.engines, or your own as "
    "package.module:ClassName (`fedselect list`, docs/architecture.md); results are identical"
)
BACKEND_HELP = "where the runs execute: local (this process, one after the other; default) or ray (one Ray task per run)"
ADDRESS_HELP = "with --backend ray: HOST:PORT of a running Ray cluster (`ray start --head` prints it); omitted: a local Ray instance is started for the command"
CPUS_PER_RUN_HELP = "with --backend ray: CPUs each run reserves (also its worker processes unless --workers is given)"
RAY_CPUS_HELP = "with --backend ray and no --address: CPUs of the local Ray instance (default: all cores)"


class EngineName(click.ParamType):
    """``--engine``: a name of the engine registry (:data:`fedselect.registry.ENGINES`: the
    built-ins and entry points, what shell completion offers) or ``package.module:ClassName``;
    the resolve step then checks that it loads and is an engine."""

    name = "engine"

    def get_metavar(self, param, ctx=None) -> str:
        return "[" + "|".join(default_first(ENGINES.builtin_names())) + "|package.module:ClassName]"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and (":" in value or value in ENGINES.names()):
            return value
        self.fail(
            f"{value!r} is not an engine; allowed: {', '.join(default_first(ENGINES.names()))}, or package.module:ClassName "
            "for your own",
            param,
            ctx,
        )

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        return [CompletionItem(n) for n in ENGINES.names() if n.startswith(incomplete)]


ENGINE = EngineName()
