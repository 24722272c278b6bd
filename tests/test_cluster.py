"""Exploration and fuzzing on a real Ray cluster (`--cluster`, docs/cluster.md):
a head and a second node started on 127.0.0.1 by the test (`ray start --head`,
`ray start --address`, never Ray's local mode) and stopped after; an
exploration's parts run as tasks and combine into the certificate a single
process gives, with the counterexample files back on this machine; a part whose
worker is killed runs again; a fuzz campaign per CPU finds what one finds;
bad input, a missing Ray and a cluster that does not answer are one line,
exit 2."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopcheck.cli import main
from loopcheck.cluster import INSTALL

TOY = "tests/toy_scheduler.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head() -> Iterator[str]:
    """A Ray cluster on 127.0.0.1 of two nodes with a CPU each (a head in its
    own temporary folder, and a node joining it), the head's address; both
    stopped after."""
    pytest.importorskip("ray", reason=f"the ray extra is not installed: {INSTALL}")
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert ray is not None
    port = free_port()
    temp = tempfile.mkdtemp(prefix="lcray", dir="/tmp")   # (short: Ray's socket paths must fit 107 bytes)
    try:
        subprocess.run([ray, "start", "--head", "--num-cpus", "1", "--port", str(port), "--node-ip-address",
                        "127.0.0.1", "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", temp],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([ray, "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", "--node-ip-address",
                        "127.0.0.1", "--disable-usage-stats"], check=True, capture_output=True, timeout=120)
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def certificate(out: Path) -> dict:
    data = json.loads((out / "certificate.json").read_text())
    return {k: v for k, v in data.items() if k not in ("seconds", "covered", "findings")}


def test_the_parts_on_a_cluster_are_the_single_run(head: str, tmp_path: Path) -> None:
    """Two bugs planted (a leak, a slot cap), every distinct signature asked for:
    the cluster's certificate is the single process's, and its counterexample
    files are here, each replaying its finding."""
    argv = ["explore", "--adapter", f"{TOY}:leaky_over_slots", "--scope", "tiny", "--keep-going"]
    assert main([*argv, "--out", str(tmp_path / "one")]) == 1
    assert main([*argv, "--out", str(tmp_path / "ray"), "--cluster", head]) == 1
    single, cluster = certificate(tmp_path / "one"), certificate(tmp_path / "ray")
    assert cluster.pop("parts") == 2 and single.pop("parts") == 1   # (the cluster's 2 CPUs, one a node: 2 parts)
    assert cluster == single
    findings = json.loads((tmp_path / "ray" / "certificate.json").read_text())["findings"]
    assert len(findings) >= 2
    for finding in findings:
        path = Path(finding["file"])
        assert path.parent == tmp_path / "ray" and path.is_file()
        assert main(["replay", str(path), "--adapter", f"{TOY}:leaky_over_slots", "--check", "property"]) == 1


def test_a_campaign_per_cpu_of_the_cluster_finds_both_planted_bugs(head: str, tmp_path: Path, capsys) -> None:
    """`fuzz --cluster`: a campaign per CPU of the cluster, each with its derived
    seed; one summary with both planted bugs, their files here, each replaying."""
    assert main(["fuzz", "--adapter", f"{TOY}:leaky_over_slots", "--keep-going", "--max-examples", "300", "--seed",
                 "2", "--out", str(tmp_path), "--json", "--cluster", head]) == 1
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["workers"] == 2 and len(summary["bugs"]) == 2
    assert sorted(s for bug in summary["bugs"] for s in bug["signatures"]) == ["kv-conservation.reported-errors",
                                                                               "seq-cap"]
    for entry in summary["counterexamples"]:
        path = Path(entry["file"])
        assert path.is_file() and tmp_path in path.parents
        assert main(["replay", str(path), "--adapter", f"{TOY}:leaky_over_slots", "--check", "property"]) == 1


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:1", "--cluster 127.0.0.1:1: no Ray cluster answers"),
    ("head-without-port", "expected auto or HOST:PORT")])
def test_a_cluster_that_does_not_answer_is_one_line(address: str, message: str, tmp_path: Path, capsys) -> None:
    pytest.importorskip("ray", reason=f"the ray extra is not installed: {INSTALL}")
    assert main(["explore", "--adapter", "model", "--scope", "tiny", "--cluster", address, "--out",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_without_ray_the_flag_names_the_install_command(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)   # (import ray fails)
    assert main(["explore", "--adapter", "model", "--scope", "tiny", "--cluster", "auto", "--out",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"loopcheck explore: error: --cluster needs Ray, which is not installed: {INSTALL}"]


def task_processes() -> list[int]:
    """The Ray worker processes running one of loopcheck's tasks now (their title
    names the task)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().startswith(b"ray::_shipped"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.slow   # (45 s: a minute-long exploration on the cluster)
def test_a_part_whose_worker_is_killed_is_run_again(head: str, tmp_path: Path) -> None:
    """SIGKILL to the worker running a part, mid-exploration: the part runs again
    and the run ends with the certificate it would have given (the small
    preset's pinned counts on minisched, docs/benchmarks.md)."""
    proc = subprocess.Popen([sys.executable, "-m", "loopcheck.cli", "explore", "--adapter",
                             "examples/adapter/minisched_adapter.py:MiniSchedSUT", "--scope", "small", "--cluster",
                             head, "--out", str(tmp_path), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 120
        while not task_processes() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        time.sleep(2)   # (well into the part)
        victims = task_processes()
        assert victims, "no task was seen running"
        os.kill(victims[0], signal.SIGKILL)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    tally = json.loads(out.splitlines()[-1])["tally"]
    assert tally["complete"] and (tally["units"], tally["workloads"], tally["states"], tally["transitions"]) == (
        120, 38888, 19821, 43357)


def test_a_folder_named_ray_is_not_taken_for_ray(tmp_path: Path, capsys, monkeypatch) -> None:
    """Without Ray installed, a folder named ray where Python looks (Ray's own
    /tmp/ray, when run from /tmp) imports as an empty package: still the one
    line naming the install command."""
    folder = types.ModuleType("ray")   # (what importing a bare folder gives: a package with a path, nothing in it)
    folder.__path__ = [str(tmp_path / "ray")]
    monkeypatch.setitem(sys.modules, "ray", folder)
    assert main(["explore", "--adapter", "model", "--scope", "tiny", "--cluster", "auto", "--out",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is not Ray): {INSTALL}" in err[0]
