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
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_cluster(cpus: Sequence[int] = (1, 1)) -> Iterator[str]:
    """A head with cpus[0] CPUs and a node joining it for each further entry,
    the head's HOST:PORT while the block runs; stopped after."""
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        raise RuntimeError("no ray command: python3 -m pip install -c constraints.txt -e '.[ray]'")
    port = free_port()
    temp = tempfile.mkdtemp(prefix="lcray", dir="/tmp")   # (short: Ray's socket paths must fit 107 bytes)
    try:
        subprocess.run([ray, "start", "--head", "--num-cpus", str(cpus[0]), "--port", str(port), "--node-ip-address",
                        "127.0.0.1", "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", temp],
                       check=True, capture_output=True, timeout=120)
        for more in cpus[1:]:
            subprocess.run([ray, "start", "--address", f"127.0.0.1:{port}", "--num-cpus", str(more),
                            "--node-ip-address", "127.0.0.1", "--disable-usage-stats"], check=True,
                           capture_output=True, timeout=120)
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
