"""A command's parts as tasks of a Ray cluster (`--cluster`, docs/cluster.md):
the parts run where the cluster has room, and the files a part writes come back
to this machine with its result. A part whose worker dies is run again from the
start where its command asks for retries (an exploration's part is
deterministic, so its retry gives what the lost run would have); a command
that keeps what a lost part left instead (a fuzz campaign's findings, through
its hub: loopcheck/cluster_share.py) says what stands for its result. Used by
`explore --scope` (its parts), `fuzz` (its campaigns) and `verify` (its
campaigns)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loopcheck.model.errors import WorkloadError

INSTALL = "python3 -m pip install -c constraints.txt -e '.[ray]'"
PROBE_SECONDS = 5.0   # for a head at HOST:PORT to accept a connection
CLIENT = "ray://"     # an address of a head's Ray Client server (the driver outside the cluster)
POLL_SECONDS = 0.5    # how often the driver hears from a command's `poll` while its tasks run
RETRIES = 3   # runs of a part whose worker died (a node lost, a process killed) before the command fails


def connect(address: str) -> Any:
    """The `ray` module, connected as a driver to the cluster at `address`
    (auto: RAY_ADDRESS or a head running on this machine; HOST:PORT: that head,
    this machine a node of it; ray://HOST:PORT: that head's Ray Client server,
    from a machine outside the cluster); WorkloadError, one line, when Ray is
    not installed or no cluster answers."""
    try:
        import ray
    except ImportError:
        raise WorkloadError(f"--cluster needs Ray, which is not installed: {INSTALL}") from None
    if not hasattr(ray, "init"):   # (a folder named ray on the path, such as Ray's own /tmp/ray, imports as one)
        raise WorkloadError(f"--cluster needs Ray, which is not installed (the folder {list(ray.__path__)[0]} is "
                            f"not Ray): {INSTALL}")
    if address != "auto":
        probe(address)
    try:
        ray.init(address=address, log_to_driver=True, logging_level="ERROR", configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise WorkloadError(f"--cluster {address}: no Ray cluster answers ({one_line(exc)}); start one with "
                            "`ray start --head`") from None
    return ray


def probe(address: str) -> None:
    """WorkloadError, one line, unless something listens at [ray://]HOST:PORT
    within PROBE_SECONDS (Ray itself would keep trying to reach it for minutes)."""
    host, _, port = address.removeprefix(CLIENT).rpartition(":")
    if not host or not port.isdigit():
        raise WorkloadError(f"--cluster {address}: expected auto, HOST:PORT or ray://HOST:PORT (a Ray head's "
                            "address)")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_SECONDS).close()
    except OSError as exc:
        raise WorkloadError(f"--cluster {address}: no Ray cluster answers ({exc.strerror or exc}); start one with "
                            "`ray start --head`") from None


def cluster_cpus(ray: Any) -> int:
    """The CPUs the connected cluster has in all."""
    return int(ray.cluster_resources().get("CPU", 1))


def in_tasks(ray: Any, fn: Callable[[Any], Any], jobs: Sequence[Any], folders: Sequence[Path],
             retries: int = RETRIES, lost: Callable[[int, str], Any] | None = None,
             poll: Callable[[], None] = lambda: None) -> list[Any]:
    """fn(job) for every job as a task of the connected cluster, the results in
    job order; what job k wrote in its own folder `folders[k]` (on whichever
    node ran it) is written again in that folder here. A job whose worker or
    node dies is run again up to `retries` times; after that, `lost(k, why)`
    stands for its result (without `lost`, the command fails). `poll()` is
    called every POLL_SECONDS while tasks run and as each ends, before its
    result is taken (for what a command delivers as it is written). A job that
    raises fails the command with its error (a WorkloadError, such as an
    adapter a node cannot import, as one line). Ctrl-C or SIGTERM cancels every
    task; the driver disconnects either way."""
    from ray.exceptions import RayError, RayTaskError

    task = ray.remote(max_retries=retries)(_shipped)
    here = os.getcwd()
    refs = [task.remote(fn, job, str(folder), here) for job, folder in zip(jobs, folders, strict=True)]
    done: dict[int, tuple[Any, dict[str, bytes]]] = {}
    try:
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=POLL_SECONDS)
            poll()
            if not ready:
                continue
            k = refs.index(ready[0])
            try:
                done[k] = ray.get(ready[0])
            except RayTaskError as exc:   # (bad input met on a node is one line, as here; a bug, its traceback)
                if isinstance(exc.cause, WorkloadError):
                    raise WorkloadError(f"{exc.cause} (in a task of the cluster)") from None
                raise
            except RayError as exc:   # (its worker or node died, after its retries)
                if lost is None:
                    raise
                done[k] = lost(k, one_line(exc)), {}
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    finally:
        ray.shutdown()
    results = []
    for k, folder in enumerate(folders):
        result, files = done[k]
        for name, data in files.items():
            put(folder / name, data)
        results.append(result)
    return results


def put(path: Path, data: bytes) -> None:
    """`data` at `path`, whole: a reader sees the file before or after, never
    half written (a task on this machine may be reading its own copy)."""
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.part")
    part.write_bytes(data)
    part.replace(path)


def one_line(exc: BaseException) -> str:
    """The first line of an error's message (its type where it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _shipped(fn: Callable[[Any], Any], job: Any, folder: str, cwd: str) -> tuple[Any, dict[str, bytes]]:
    """fn(job) on a node, in the driver's working folder `cwd` where the node
    has it (so that the paths a job names mean what they mean to the driver),
    with the bytes of every file in the job's own `folder` afterwards (by path
    relative to it), so that the driver has them whichever node ran it."""
    if Path(cwd).is_dir():
        os.chdir(cwd)
    result = fn(job)
    root = Path(folder)
    files = {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}
    return result, files
