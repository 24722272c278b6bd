"""A Ray cluster on this machine for tests and benchmarks: a head on 127.0.0.1 in
its own temporary folder and nodes joining it (`ray start`, never Ray's local
mode), every Ray process of this machine stopped after (`ray stop --force`)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

WORKER_PORTS = range(10002, 20000)   # the ports `ray start` keeps for its workers by default


def free_port() -> int:
    """A port free now on 127.0.0.1, outside the range Ray keeps for its workers."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in WORKER_PORTS:
            return port


@dataclass(frozen=True)
class LocalCluster:
    """Where the cluster answers: the head's HOST:PORT (for a driver on one of
    its nodes) and its Ray Client server's ray://HOST:PORT."""

    address: str
    client: str


@contextmanager
def local_cluster(cpus: Sequence[int] = (1, 1)) -> Iterator[LocalCluster]:
    """A head with cpus[0] CPUs (and a Ray Client server) and a node joining it
    for each further entry, while the block runs; stopped after."""
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        raise RuntimeError("no ray command: python3 -m pip install -c constraints.txt -e '.[ray]'")
    port, client = free_port(), free_port()
    temp = tempfile.mkdtemp(prefix="lcray", dir="/tmp")   # (short: Ray's socket paths must fit 107 bytes)
    try:
        subprocess.run([ray, "start", "--head", "--num-cpus", str(cpus[0]), "--port", str(port), "--node-ip-address",
                        "127.0.0.1", "--ray-client-server-port", str(client), "--include-dashboard=false",
                        "--disable-usage-stats", "--temp-dir", temp],
                       check=True, capture_output=True, timeout=120)
        for more in cpus[1:]:
            subprocess.run([ray, "start", "--address", f"127.0.0.1:{port}", "--num-cpus", str(more),
                            "--node-ip-address", "127.0.0.1", "--disable-usage-stats"], check=True,
                           capture_output=True, timeout=120)
        yield LocalCluster(f"127.0.0.1:{port}", f"ray://127.0.0.1:{client}")
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
