"""A real Flower deployment on one machine: a SuperLink and N SuperNodes on 127.0.0.1 as
separate processes, for tests, demos and trying a deployment before spreading it over machines
(docs/flower.md gives the same commands for several machines, with TLS).

::

    with LocalDeployment(num_nodes=3, node_config=lambda i: {"partition-id": i, "num-partitions": 3},
                         home=tmp / "flwr-home") as dep:
        res = dep.run_app(app_dir, run_config={"num-server-rounds": 2}, timeout=300)
        dep.kill_node(1)            # a node that disappears

Every process is started in its own process group; when the block exits (also on errors and
Ctrl-C) the groups and every descendant (Flower detaches some helpers, ``flower-superexec``,
into sessions of their own) are killed, so nothing is left running: a SuperNode runs each
ClientApp in a child process (``flwr-clientapp``) and keeps a ``flower-superexec`` beside it.
Flower's telemetry and update check are switched off in the processes' environment
(``FLWR_TELEMETRY_ENABLED=0``, ``FLWR_DISABLE_UPDATE_CHECK=1``); nothing is downloaded
(the SuperLink runs with ``--disable-runtime-dependency-installation``: the app's
dependencies, fedselect included, must already be installed where the processes run).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["LocalDeployment", "flower_env", "free_port", "write_connection", "format_config", "processes_in_groups"]


def flower_env(home: str | Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with Flower's telemetry and update check off, this Python's
    ``bin`` directory first on ``PATH`` (Flower starts its helper processes by name) and
    ``FLWR_HOME`` set when ``home`` is given."""
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
    # the SuperLink and SuperNodes start flower-superexec / flwr-clientapp from PATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if home is not None:
        env["FLWR_HOME"] = str(home)
    env.update(extra or {})
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def format_config(values: dict[str, Any]) -> str:
    """``{"partition-id": 0, "data.dataset": "mnist-embedded"}`` -> the ``key=value ...``
    string of ``--node-config`` / ``--run-config`` (TOML values: strings quoted).

    Raises:
        ValueError: a value that is not bool/int/float/str, or a string holding a double quote.
    """
    parts = []
    for k, v in values.items():
        if isinstance(v, bool):
            parts.append(f"{k}={'true' if v else 'false'}")
        elif isinstance(v, (int, float)):
            parts.append(f"{k}={v}")
        elif isinstance(v, str):
            if '"' in v:
                raise ValueError(f"config value of {k!r} cannot hold a double quote: {v!r}")
            parts.append(f'{k}="{v}"')
        else:
            raise ValueError(f"config value of {k!r} must be bool, int, float or str (Flower configs hold no lists), got {v!r}")
    return " ".join(parts)


def write_connection(home: str | Path, name: str, address: str, root_certificates: str | Path | None = None) -> Path:
    """Write ``FLWR_HOME/config.toml`` with one SuperLink connection ``name`` (the default),
    used by ``flwr run APP NAME``: insecure without ``root_certificates``, TLS with it."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", f'default = "{name}"', "", f"[superlink.{name}]", f'address = "{address}"']
    lines.append(f'root-certificates = "{Path(root_certificates).resolve()}"' if root_certificates else "insecure = true")
    path = home / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _bin(name: str) -> str:
    """An executable of the environment this Python runs in (the venv's ``flwr`` etc.)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


class LocalDeployment:
    """A SuperLink and ``num_nodes`` SuperNodes on 127.0.0.1 (module docstring).

    Args:
        num_nodes: SuperNodes to start.
        node_config: ``i -> {key: value}`` of SuperNode ``i`` (``--node-config``); default
            ``{"partition-id": i, "num-partitions": num_nodes}``.
        home: FLWR_HOME of every process (SuperLink state, installed apps, the CLI's
            connection file); a directory of the caller's (e.g. a test's tmp_path).
        logs: directory for one log file per process (default ``home/logs``).
        startup_timeout: seconds to wait for the SuperLink to answer.
    """

    def __init__(
        self,
        num_nodes: int,
        home: str | Path,
        node_config: Callable[[int], dict[str, Any]] | None = None,
        logs: str | Path | None = None,
        startup_timeout: float = 60.0,
    ):
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
        self.num_nodes = num_nodes
        self.home = Path(home)
        self.logs = Path(logs) if logs else self.home / "logs"
        self.node_config = node_config or (lambda i: {"partition-id": i, "num-partitions": num_nodes})
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.superlink: subprocess.Popen | None = None
        self.nodes: list[subprocess.Popen | None] = []
        self._files: list[Any] = []
        self.startup_s = 0.0

    # ------------------------------------------------------------------ processes
    def _start(self, args: list[str], log_name: str) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        fh = (self.logs / f"{log_name}.log").open("w")
        self._files.append(fh)
        return subprocess.Popen(
            args, stdout=fh, stderr=subprocess.STDOUT, env=flower_env(self.home), cwd=self.home, start_new_session=True
        )

    def __enter__(self) -> "LocalDeployment":
        t0 = time.perf_counter()
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            self.superlink = self._start(
                [
                    _bin("flower-superlink"),
                    "--insecure",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--disable-runtime-dependency-installation",
                ],
                "superlink",
            )
            self._wait_superlink()
            write_connection(self.home, "local-deployment", self.address)
            for i in range(self.num_nodes):
                self.nodes.append(self._start_node(i))
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - t0
        return self

    def _start_node(self, i: int) -> subprocess.Popen:
        return self._start(
            [
                _bin("flower-supernode"),
                "--insecure",
                "--superlink",
                self.address,
                "--port",
                str(free_port()),
                "--node-config",
                format_config(self.node_config(i)),
            ],
            f"supernode-{i}",
        )

    def _wait_superlink(self) -> None:
        import httpx

        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.superlink.poll() is not None:
                raise RuntimeError(
                    f"flower-superlink exited with code {self.superlink.returncode}; see {self.logs / 'superlink.log'}"
                )
            try:
                if httpx.get(f"http://{self.address}/health", timeout=0.5).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(
            f"flower-superlink did not answer on {self.address} within {self.startup_timeout:.0f} s; "
            f"see {self.logs / 'superlink.log'}"
        )

    def kill_node(self, i: int) -> None:
        """Kill SuperNode ``i`` and its ClientApp processes at once (SIGKILL: a node that
        vanishes, as a crashed or disconnected device)."""
        p = self.nodes[i]
        if p is not None:
            _kill_group(p, signal.SIGKILL)
            self.nodes[i] = None

    def run_app(
        self, app_dir: str | Path, run_config: dict[str, Any] | None = None, timeout: float = 600, stream: bool = True
    ) -> subprocess.CompletedProcess:
        """``flwr run APP_DIR local-deployment [--run-config ...] --stream``; returns when the
        run has finished (its ServerApp's output is in ``stdout``).

        Raises:
            subprocess.TimeoutExpired: not finished within ``timeout`` seconds.
        """
        args = [_bin("flwr"), "run", str(app_dir), "local-deployment"]
        if run_config:
            args += ["--run-config", format_config(run_config)]
        if stream:
            args.append("--stream")
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=flower_env(self.home, {"NO_COLOR": "1"}))

    def close(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after 5 s) with everything they started,
        wait until none is left (at most 10 s more) and close the log files."""
        procs = [p for p in [*self.nodes, self.superlink] if p is not None]
        # Flower detaches some helpers (flower-superexec) into sessions of their own: collect
        # every descendant now, while the parents are alive
        family = {d: _start_time(d) for p in procs for d in _descendants(p.pid)}
        for p in procs:
            _kill_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _kill_group(p, signal.SIGKILL)
        for pid, started in family.items():
            if _start_time(pid) == started is not None:  # the same process, not a reused pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + 10
        while any(_alive(pid) and _start_time(pid) == t for pid, t in family.items()) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.nodes, self.superlink = [], None
        for fh in self._files:
            fh.close()
        self._files = []

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def log(self, name: str) -> str:
        """The text of a process's log (``superlink``, ``supernode-0`` ...)."""
        p = self.logs / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""


def _kill_group(p: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the process group of ``p`` (which it leads: ``start_new_session``)."""
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    if sig == signal.SIGKILL:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process from /proc (None: gone, or no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def _start_time(pid: int) -> int | None:
    """The start time of a process (clock ticks since boot; None: gone), to tell it from a
    later process that got the same pid."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    st = _proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return set()
    for d in proc.iterdir():
        if d.name.isdigit():
            st = _proc_stat(int(d.name))
            if st is not None:
                children.setdefault(st[1], []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def processes_in_groups(pgids: set[int]) -> list[int]:
    """Live (non-zombie) processes whose process group is one of ``pgids`` (Linux /proc)."""
    out = []
    for d in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if d.name.isdigit():
            st = _proc_stat(int(d.name))
            if st is not None and st[2] in pgids and st[0] not in ("Z", "X"):
                out.append(int(d.name))
    return out
