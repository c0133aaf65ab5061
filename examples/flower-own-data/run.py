"""A real fleet on this machine: a SuperLink and 4 SuperNodes on 127.0.0.1 over TLS, each node
training on a file of its own, Oort choosing 2 of the 4 per round; the server never has the
nodes' data.

    python examples/flower-own-data/run.py WORK_DIR [--server-test]

WORK_DIR receives the data files (make_data.py), the certificates (a private CA and a SuperLink
certificate for 127.0.0.1, as docs/flower.md's openssl recipe makes them), Flower's state and
logs, and the run directory ``WORK_DIR/run`` (metrics.csv, summary.json, model.pt ...).
``--server-test`` gives the server a test set of its own (``WORK_DIR/data/server/test.npz``);
without it evaluation is federated. Each SuperNode is told only its own file (--node-config
``data-path``); the ServerApp is told none of them.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_data import write_files  # noqa: E402

#: what each node says about its device and network (a class of the server's tables, or a speed;
#: node 2 gives no device: it measures its own training speed)
NODE_PROFILES = {
    0: {"device": "raspberry-pi-3", "network": "wifi-1"},
    1: {"device": "intel-i5", "network": "wifi-4"},
    2: {"bandwidth-mbps": 50.0},
    3: {"device": "jetson-nano", "network": "fast-ethernet"},
}


def make_tls(d: Path):
    """A private CA and a SuperLink certificate for 127.0.0.1 / localhost signed by it (P-256,
    valid for a day), written to ``d``; the cryptography package comes with flwr."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from fedselect.flower.deployment import TLSFiles

    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, public, signer, ext):
        b = x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
        b = b.serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        b = b.not_valid_after(now + datetime.timedelta(days=1)).add_extension(*ext)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedselect example CA")])
    ca = cert(ca_name, ca_name, ca_key.public_key(), ca_key, (x509.BasicConstraints(ca=True, path_length=None), True))
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")])
    server = cert(name, ca_name, key.public_key(), ca_key, (san, False))
    (d / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (d / "server.key").write_bytes(pem)
    return TLSFiles(d / "ca.crt", d / "server.pem", d / "server.key")


def node_config(i: int, files: list[Path]) -> dict:
    """SuperNode i's --node-config: its client id, its own file, its device and network."""
    return {"partition-id": i, "num-partitions": len(files), "data-path": str(files[i]), "torch-threads": 1, **NODE_PROFILES[i]}


def run(work: str | Path, server_test: bool = False, app: str | Path = HERE, timeout: float = 600) -> dict:
    """Write the data and certificates, start the deployment over TLS, ``flwr run`` the app;
    returns the run's summary.json.

    Raises:
        RuntimeError: the run failed (the ServerApp's output and the processes' logs in the message).
    """
    from fedselect.flower.deployment import LocalDeployment

    work = Path(work).resolve()
    files, server_file = write_files(work / "data")
    tls = make_tls(work / "certs")
    run_dir = work / "run"
    settings = {"run-dir": str(run_dir), "overwrite": True}
    if server_test:
        settings.update({"test-data": "fedselect.flower.owndata:load_npz", "test-data-path": str(server_file)})
    with LocalDeployment(len(files), home=work / "flwr-home", node_config=lambda i: node_config(i, files), tls=tls) as dep:
        res = dep.run_app(app, run_config=settings, timeout=timeout)
        if res.returncode != 0 or "ServerApp raised" in res.stdout or not (run_dir / "summary.json").is_file():
            logs = "\n".join(
                f"--- {n}\n{dep.log(n)[-2000:]}" for n in ["superlink"] + [f"supernode-{i}" for i in range(len(files))]
            )
            raise RuntimeError(f"the run failed:\n{res.stdout[-4000:]}\n{res.stderr[-2000:]}\n{logs}")
    return json.loads((run_dir / "summary.json").read_text())


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", help="a directory for the data, certificates, Flower's state and the run")
    ap.add_argument("--server-test", action="store_true", help="give the server a test set of its own")
    a = ap.parse_args()
    s = run(a.work, a.server_test)
    print(f"{s['rounds']} rounds, final accuracy {s['final_accuracy']:.4f} ({s['flower']['evaluation']}); run in {a.work}/run")
