"""A real Flower deployment on one machine: a SuperLink and N SuperNodes on 127.0.0.1 as
separate processes, for tests, demos and trying a deployment before spreading it over machines
(docs/flower.md gives the same commands for several machines).

::

    with LocalDeployment(num_nodes=3, node_config=lambda i: {"partition-id": i, "num-partitions": 3},
                         home=tmp / "flwr-home") as dep:
        res = dep.run_app(app_dir, run_config={"num-server-rounds": 2}, timeout=300)
        dep.kill_node(1)            # a node that disappears

Insecure by default; with ``tls=TLSFiles(ca, cert, key)`` every connection is TLS (the
SuperLink's certificate must name 127.0.0.1: its own ``flower-superexec`` dials the SuperLink
there, and a certificate without it leaves ``flwr run`` pending with no error, so it is refused
up front), and with ``authenticate=True`` as well the SuperLink admits only the SuperNodes whose
public keys were registered (``--enable-supernode-auth``, ``flwr supernode register``; Flower
allows it only over TLS). A node's key pair is an OpenSSH-format EC key on a NIST curve
(``ssh-keygen -t ecdsa -b 384 -N "" -f node-0`` writes ``node-0`` and ``node-0.pub``)::

    with LocalDeployment(3, home, tls=TLSFiles(ca, cert, key), authenticate=True,
                         node_keys={i: keys / f"node-{i}" for i in range(3)}) as dep:
        ...                         # nodes 0-2 registered (register= says which) and started

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
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = [
    "LocalDeployment",
    "TLSFiles",
    "flower_env",
    "free_port",
    "write_connection",
    "format_config",
    "processes_in_groups",
    "certificate_addresses",
]


@dataclass(frozen=True)
class TLSFiles:
    """The PEM files of a TLS deployment: ``ca`` (the CA certificate the SuperNodes and the
    ``flwr`` CLI verify the SuperLink with), ``cert`` (the SuperLink's certificate, signed by
    the CA; its subjectAltName must hold every address the SuperLink is dialled at) and ``key``
    (the SuperLink's private key)."""

    ca: Path
    cert: Path
    key: Path


def certificate_addresses(cert: str | Path) -> tuple[list[str], list[str]]:
    """(IP addresses, DNS names) of a PEM certificate's subjectAltName (empty without one).

    Raises:
        ValueError: the file is not a PEM certificate (names it).
    """
    import ipaddress

    from cryptography import x509

    try:
        c = x509.load_pem_x509_certificate(Path(cert).read_bytes())
    except ValueError as e:
        raise ValueError(f"{cert}: not a PEM certificate ({e})") from None
    try:
        san = c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    ips = [str(ipaddress.ip_address(a)) for a in san.get_values_for_type(x509.IPAddress)]
    return ips, list(san.get_values_for_type(x509.DNSName))


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
        startup_timeout: seconds to wait for the SuperLink to answer, and for each
            ``flwr supernode register``.
        tls: the deployment's certificates (None: insecure).
        node_keys: ``i -> `` the private key of SuperNode ``i`` (OpenSSH-format EC key; its
            public key beside it as ``<key>.pub``), passed as ``--auth-supernode-private-key``.
        authenticate: the SuperLink admits only registered SuperNodes (needs ``tls``).
        register: the nodes whose public keys are registered before the nodes start (default:
            every node of ``node_keys``); a node started with an unregistered key is refused by
            the SuperLink and exits.

    Raises:
        ValueError: ``num_nodes`` < 1; ``authenticate`` without ``tls``; a node of
            ``register`` without a key; a key or certificate file missing; a certificate
            whose subjectAltName lacks 127.0.0.1 (all before anything starts).
    """

    def __init__(
        self,
        num_nodes: int,
        home: str | Path,
        node_config: Callable[[int], dict[str, Any]] | None = None,
        logs: str | Path | None = None,
        startup_timeout: float = 60.0,
        tls: TLSFiles | None = None,
        node_keys: dict[int, str | Path] | None = None,
        authenticate: bool = False,
        register: Iterable[int] | None = None,
    ):
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
        self.tls = tls
        self.node_keys = {int(i): Path(k) for i, k in (node_keys or {}).items()}
        self.authenticate = authenticate
        self.register = sorted(self.node_keys if register is None else {int(i) for i in register})
        _check_security(num_nodes, tls, self.node_keys, authenticate, self.register)
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
        self.node_ids: dict[int, int] = {}

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
                    *self._server_security(),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--disable-runtime-dependency-installation",
                ],
                "superlink",
            )
            self._wait_superlink()
            write_connection(self.home, "local-deployment", self.address, self.tls.ca if self.tls else None)
            for i in self.register:
                self.node_ids[i] = self.register_key(self.node_keys[i].with_name(self.node_keys[i].name + ".pub"))
            for i in range(self.num_nodes):
                self.nodes.append(self._start_node(i))
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - t0
        return self

    def _server_security(self) -> list[str]:
        if self.tls is None:
            return ["--insecure"]
        args = ["--ssl-ca-certfile", str(self.tls.ca), "--ssl-certfile", str(self.tls.cert), "--ssl-keyfile", str(self.tls.key)]
        return args + (["--enable-supernode-auth"] if self.authenticate else [])

    def _start_node(self, i: int) -> subprocess.Popen:
        security = ["--insecure"] if self.tls is None else ["--root-certificates", str(self.tls.ca)]
        if i in self.node_keys:
            security += ["--auth-supernode-private-key", str(self.node_keys[i])]
        return self._start(
            [
                _bin("flower-supernode"),
                *security,
                "--superlink",
                self.address,
                "--port",
                str(free_port()),
                "--node-config",
                format_config(self.node_config(i)),
            ],
            f"supernode-{i}",
        )

    def register_key(self, public_key: str | Path) -> int:
        """``flwr supernode register PUBLIC_KEY local-deployment``: the SuperLink admits the
        SuperNode holding the matching private key; returns the node id it was given.

        Raises:
            RuntimeError: the CLI failed (its output in the message).
            subprocess.TimeoutExpired: no answer within ``startup_timeout`` seconds.
        """
        args = [_bin("flwr"), "supernode", "register", str(public_key), "local-deployment", "--format", "json"]
        res = subprocess.run(
            args, capture_output=True, text=True, timeout=self.startup_timeout, env=flower_env(self.home, {"NO_COLOR": "1"})
        )
        found = re.search(r'"node-id":\s*(\d+)', res.stdout)
        if res.returncode != 0 or found is None:
            raise RuntimeError(f"flwr supernode register {public_key} failed ({res.returncode}): {res.stdout}{res.stderr}")
        return int(found.group(1))

    def _wait_superlink(self) -> None:
        import ssl

        import httpx

        scheme, verify = ("https", ssl.create_default_context(cafile=str(self.tls.ca))) if self.tls else ("http", True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.superlink.poll() is not None:
                raise RuntimeError(
                    f"flower-superlink exited with code {self.superlink.returncode}; see {self.logs / 'superlink.log'}"
                )
            try:
                if httpx.get(f"{scheme}://{self.address}/health", timeout=0.5, verify=verify).is_success:
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


def _check_security(num_nodes: int, tls: TLSFiles | None, keys: dict[int, Path], authenticate: bool, register: list[int]) -> None:
    """LocalDeployment's security settings, checked before anything starts (its Raises)."""
    if authenticate and tls is None:
        raise ValueError(
            "authenticate=True needs tls: Flower authenticates SuperNodes only over TLS (flower-superlink refuses "
            "--enable-supernode-auth with --insecure)"
        )
    bad = sorted(set(register) - set(keys)) + sorted(i for i in keys if not 0 <= i < num_nodes)
    if bad:
        raise ValueError(f"nodes {bad}: register names a node without a key, or a key names no node 0..{num_nodes - 1}")
    files = [*(keys.values()), *(k.with_name(k.name + ".pub") for i, k in keys.items() if i in register)]
    files += [tls.ca, tls.cert, tls.key] if tls else []
    missing = [str(f) for f in files if not Path(f).is_file()]
    if missing:
        raise ValueError(f"missing key or certificate files: {missing}")
    if tls is not None:
        ips, names = certificate_addresses(tls.cert)
        if "127.0.0.1" not in ips:
            raise ValueError(
                f"{tls.cert}: its subjectAltName (IP {ips}, DNS {names}) lacks IP:127.0.0.1, where this SuperLink "
                "listens and where its own flower-superexec dials it; with such a certificate `flwr run` stays "
                "pending forever. Add IP:127.0.0.1 to the certificate"
            )


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
