"""Start-up of the two commands a new user runs first: where the seconds go before (and in) the
first round of ``fedselect run`` (no config) and ``fedselect compare`` (no config, what
``make demo`` runs).

One command::

    python benchmarks/startup.py            # the default run (30 rounds) and comparison (3 x 30 rounds)
    python benchmarks/startup.py --quick    # 1 round each: a few seconds to a minute
    python benchmarks/startup.py --repeat 3 --out startup.json

(``python benchmarks/run_all.py --only startup`` runs it too.) Every command runs in a fresh
process (``python benchmarks/startup.py --probe ...``), which times its own phases and runs
the real command line (:func:`fedselect.cli.main`) inside:

* ``interpreter_s``: from this script's ``Popen`` to the probe's first line (the interpreter
  and ``site``);
* ``import_cli_s``: ``import fedselect.cli`` (all ``fedselect --help`` needs);
* ``import_run_s``: the modules the command imports before doing anything (``fedselect.api``,
  for ``compare`` also ``fedselect.study.compare`` and ``fedselect.report.build``); imports made later,
  on first use, fall into the phase that makes them;
* ``data_load_s``: the data-set loader (``fedselect.world.data.catalog.load_dataset``);
* ``federation_s``: building the federation (the data load, the partition, the fleet);
* ``pool_start_s``: constructing the run's client trainer
  (:class:`fedselect.fl.local.pool.ClientTrainer`: its worker processes, when it starts any), summed
  over the runs of a comparison; ``pool_workers`` lists each trainer's worker count;
* ``first_round_s``: round 1 of the first run (``timing.csv``; round 0, the evaluation of the
  initial model, is ``initial_eval_s``);
* ``rounds_s``: every round of every run, round 0 included (``timing.csv``);
* ``total_wall_s``: ``Popen`` to exit; ``tree_cpu_s``: user + system CPU seconds of the probe
  and every process it started (fork server, workers), sampled from ``/proc`` every 50 ms;
  ``main_cpu_s``: the probe's own CPU seconds. CPU seconds vary less than wall seconds on a
  shared machine; both are given, with the load average before and after.

Each phase is given as wall seconds and, for phases of the main process, CPU seconds
(``*_cpu_s``). The same numbers for ``fedselect --help`` (``help_wall_s``) come from a bare
process. The data-set cache (docs/performance.md, "Start-up") is used as a user's second run
finds it; ``--cold-cache`` runs with an empty one (``FEDSELECT_CACHE_DIR`` set to a fresh
directory). Linux only (``/proc``). Results go to ``benchmarks/results/startup.json`` (or
``--out``) and are printed as a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: the scenarios: name -> the command line (after ``fedselect``) of the full and --quick forms
SCENARIOS = {
    "run": (["run", "-q"], ["run", "-q", "--rounds", "1"]),
    "compare": (["compare", "-q"], ["compare", "-q", "--rounds", "1"]),
}
#: the phases of a scenario, in the order of the table
PHASES = (
    "interpreter_s",
    "import_cli_s",
    "import_run_s",
    "data_load_s",
    "federation_s",
    "pool_start_s",
    "initial_eval_s",
    "first_round_s",
    "rounds_s",
    "total_wall_s",
    "tree_cpu_s",
    "main_cpu_s",
)


# =============================================================================== the probe (child)
def probe(args: list[str], out_json: str, t_launch: float) -> None:
    """Run ``fedselect ARGS`` in this process with timers on its phases; write them to ``out_json``."""
    t_first = time.time()
    import time as _t

    marks: dict[str, float] = {"interpreter_s": t_first - t_launch}
    c0, w0 = _t.process_time(), _t.perf_counter()
    import fedselect.cli

    marks["import_cli_s"], marks["import_cli_cpu_s"] = _t.perf_counter() - w0, _t.process_time() - c0
    c0, w0 = _t.process_time(), _t.perf_counter()
    import fedselect.api  # noqa: F401  (what `run` and `compare` import first)

    if args[0] == "compare":
        import fedselect.report.build  # noqa: F401
        import fedselect.study.compare  # noqa: F401
    marks["import_run_s"], marks["import_run_cpu_s"] = _t.perf_counter() - w0, _t.process_time() - c0

    spans: dict[str, list[tuple[float, float]]] = {"data_load": [], "federation": [], "pool_start": []}
    workers: list[int] = []

    def timed(fn, key):
        def wrapper(*a, **kw):
            c, w = _t.process_time(), _t.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spans[key].append((_t.perf_counter() - w, _t.process_time() - c))

        wrapper.__wrapped__ = fn
        return wrapper

    def rebind(module_name: str, attr: str, key: str) -> bool:
        """Time every call of ``module_name.attr``, under every name a loaded module binds it to."""
        mod = sys.modules.get(module_name)
        if mod is None:
            try:
                mod = __import__(module_name, fromlist=["_"])
            except ImportError:
                return False
        fn = getattr(mod, attr, None)
        if fn is None:
            return False
        wrapped = timed(fn, key)
        for m in list(sys.modules.values()):
            d = getattr(m, "__dict__", None)
            if d is not None and any(v is fn for v in list(d.values())):
                for k, v in list(d.items()):
                    if v is fn:
                        setattr(m, k, wrapped)
        return True

    found = {
        "data_load": rebind("fedselect.world.data.catalog", "load_dataset", "data_load"),
        "federation": rebind("fedselect.world.federation", "build_federation", "federation"),
    }
    try:
        from fedselect.fl.local.pool import ClientTrainer

        init = ClientTrainer.__init__

        def trainer_init(self, *a, **kw):
            c, w = _t.process_time(), _t.perf_counter()
            try:
                return init(self, *a, **kw)
            finally:
                spans["pool_start"].append((_t.perf_counter() - w, _t.process_time() - c))
                workers.append(int(getattr(self, "workers", -1)))

        ClientTrainer.__init__ = trainer_init
        found["pool_start"] = True
    except ImportError:
        found["pool_start"] = False

    sys.argv = ["fedselect", *args]
    rc = 0
    try:
        fedselect.cli.main()
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    for key, vals in spans.items():
        if found.get(key):
            marks[f"{key}_s"] = sum(w for w, _ in vals)
            marks[f"{key}_cpu_s"] = sum(c for _, c in vals)
    marks["pool_workers"] = workers
    marks["main_cpu_s"] = _t.process_time()
    marks["rc"] = rc
    Path(out_json).write_text(json.dumps(marks))


# =============================================================================== the parent
def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
    except OSError:
        pass
    return out


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime of the process itself


class TreeCpu(threading.Thread):
    """User + system CPU seconds of a process and all its descendants, from ``/proc`` every
    ``period`` s (a process is counted at its last sample: up to ``period`` is missed per
    process at its end)."""

    def __init__(self, pid: int, period: float = 0.05):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.last: dict[int, int] = {}
        self.stop = threading.Event()

    def sample(self) -> None:
        todo, seen = [self.pid], set()
        while todo:
            p = todo.pop()
            if p in seen:
                continue
            seen.add(p)
            t = _cpu_ticks(p)
            if t is not None:
                self.last[p] = max(t, self.last.get(p, 0))
            todo += _children(p)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.period)

    @property
    def seconds(self) -> float:
        return sum(self.last.values()) / _TICK


def _round_times(out_dir: Path) -> dict[str, float]:
    """Round 0 and round 1 of the first run, and every round of every run, from ``timing.csv``."""
    files = sorted(out_dir.rglob("timing.csv"), key=lambda p: (p.parent / "inputs.json").stat().st_mtime_ns)
    res: dict[str, float] = {"runs": len(files)}
    total = 0.0
    for i, f in enumerate(files):
        rows = [line.split(",") for line in f.read_text().splitlines()[1:] if line.strip()]
        total += sum(float(r[1]) for r in rows)
        if i == 0:
            by_round = {int(r[0]): float(r[1]) for r in rows}
            res["initial_eval_s"] = by_round.get(0, float("nan"))
            res["first_round_s"] = by_round.get(1, float("nan"))
    res["rounds_s"] = total
    return res


def run_probe(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    """One fresh process running ``fedselect CMD`` under the probe; its phases."""
    with tempfile.TemporaryDirectory(prefix="fedselect-startup-") as d:
        out_dir, out_json = Path(d) / "out", Path(d) / "probe.json"
        load0 = loadavg()
        t_launch = time.time()
        w0 = time.perf_counter()
        args = [*cmd, "--out", str(out_dir)]
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--probe", json.dumps(args), str(out_json), repr(t_launch)],
            cwd=d,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        cpu = TreeCpu(proc.pid)
        cpu.start()
        try:
            text, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
        wall = time.perf_counter() - w0
        cpu.stop.set()
        cpu.join()
        if proc.returncode != 0 or not out_json.exists():
            return {"error": f"fedselect {' '.join(cmd)} ended with {proc.returncode}: {text[-2000:]}"}
        res = json.loads(out_json.read_text())
        res.update(_round_times(out_dir))
        res.update(total_wall_s=wall, tree_cpu_s=cpu.seconds, loadavg_before=load0, loadavg_after=loadavg())
        return res


def bare_wall(code: str, env: dict[str, str], repeat: int) -> list[float]:
    """Wall seconds of ``python -c CODE`` in fresh processes."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t)
    return out


def cpu_key(phase: str) -> str:
    """``"pool_start_s"`` -> ``"pool_start_cpu_s"`` (the main process's CPU seconds of a phase)."""
    return phase[:-2] + "_cpu_s"


def _median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def measure(
    quick: bool = False, repeat: int = 1, only: list[str] | None = None, workers: int | None = None, cold_cache: bool = False
) -> dict:
    """Every scenario ``repeat`` times (fresh processes); the medians and every repeat."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("PYTHONHASHSEED", "0")
    cache_dir = None
    if cold_cache:
        cache_dir = tempfile.mkdtemp(prefix="fedselect-cache-")
    res: dict = {
        "quick": quick,
        "repeat": repeat,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": sys.version.split()[0],
        "loadavg_start": loadavg(),
        "cold_cache": cold_cache,
        "workers": workers,
    }
    try:
        res["commit"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        res["commit"] = None
    n = max(1, repeat)
    res["interpreter_wall_s"] = statistics.median(bare_wall("pass", env, n))
    res["help_wall_s"] = statistics.median(
        bare_wall("import sys; from fedselect.cli import main; sys.argv = ['fedselect', '--help']; main()", env, n)
    )
    res["import_cli_wall_s"] = statistics.median(bare_wall("import fedselect.cli", env, n))
    res["scenarios"] = {}
    for name, (full, short) in SCENARIOS.items():
        if only and name not in only:
            continue
        cmd = list(short if quick else full)
        if workers is not None:
            cmd += ["--workers", str(workers)]
        rows = []
        for _ in range(n):
            run_env = dict(env)
            if cache_dir is not None:  # a fresh, empty cache for every repeat
                shutil.rmtree(cache_dir, ignore_errors=True)
                os.makedirs(cache_dir)
                run_env["FEDSELECT_CACHE_DIR"] = cache_dir
            rows.append(run_probe(cmd, run_env, timeout=3600))
        ok = [r for r in rows if "error" not in r]
        med = {k: _median(ok, k) for k in (*PHASES, *(cpu_key(p) for p in PHASES[1:6]))}
        res["scenarios"][name] = {"command": "fedselect " + " ".join(cmd), "median": med, "repeats": rows}
    if cache_dir is not None:
        shutil.rmtree(cache_dir, ignore_errors=True)
    res["loadavg_end"] = loadavg()
    return res


def table(res: dict) -> str:
    """The medians as a Markdown table (wall s, CPU s of the main process in parentheses)."""
    names = list(res["scenarios"])
    lines = [
        "| phase | " + " | ".join(f"`{res['scenarios'][n]['command']}`" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for p in PHASES:
        cells = []
        for n in names:
            med = res["scenarios"][n]["median"]
            w, c = med.get(p), med.get(cpu_key(p))
            cells.append("-" if w is None else f"{w:.2f}" + (f" ({c:.2f} CPU)" if c is not None else ""))
        lines.append(f"| {p[:-2].replace('_', ' ')} | " + " | ".join(cells) + " |")
    workers = {n: [r.get("pool_workers") for r in res["scenarios"][n]["repeats"]] for n in names}
    lines.append("")
    lines.append(
        f"`fedselect --help` {res['help_wall_s']:.2f} s, `import fedselect.cli` {res['import_cli_wall_s']:.2f} s, "
        f"bare interpreter {res['interpreter_wall_s']:.2f} s; pool workers per run {workers}; "
        f"load average {res['loadavg_start']:.2f} at the start, {res['loadavg_end']:.2f} at the end; "
        f"{res['cores']} cores; commit {res['commit']}."
    )
    return "\n".join(lines)


def main(quick: bool = False) -> dict:
    """The entry point of ``benchmarks/run_all.py``."""
    return measure(quick=quick)


def _cli() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        probe(json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round per run (a few seconds to a minute)")
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per scenario (medians are reported)")
    ap.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="only this scenario (repeatable)")
    ap.add_argument("--workers", type=int, default=None, help="pass --workers N to the commands (default: theirs)")
    ap.add_argument("--cold-cache", action="store_true", help="start every repeat with an empty data-set cache")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "startup.json", help="JSON output")
    a = ap.parse_args()
    res = measure(a.quick, a.repeat, a.only, a.workers, a.cold_cache)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2))
    print(table(res))
    print(f"written: {a.out}")
    bad = [r["error"] for s in res["scenarios"].values() for r in s["repeats"] if "error" in r]
    for b in bad:
        print(b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_cli())
