"""Exploration, fuzzing and verify on a real Ray cluster (`--cluster`,
docs/cluster.md): a head and a second node started on 127.0.0.1 by the test
(`ray start --head`, `ray start --address`, never Ray's local mode) and stopped
after; an exploration's parts run as tasks and combine into the certificate a
single process gives, with the counterexample files back on this machine; a
part whose worker is killed runs again; a fuzz campaign per CPU, sharing a
database and the bugs found through the hub (or Redis), each bug shrunk once;
a campaign whose worker is killed keeps what it found; Ctrl-C stops every task;
bad input, a missing Ray and a cluster that does not answer are one line,
exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.local_cluster import LocalCluster, local_cluster
from loopcheck.checks.counterexample import write_counterexample
from loopcheck.checks.suite import CheckSet, checks_for
from loopcheck.cli import main
from loopcheck.cluster import INSTALL
from loopcheck.cluster_share import Hub, deliver
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.machine import LAST_FAILURE
from loopcheck.fuzz_cmd import lost_campaign
from tests.helpers import req, workload
from tests.toy_scheduler import PINNED, leaky

TOY = "tests/toy_scheduler.py"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A Ray cluster on 127.0.0.1 of two nodes with a CPU each (a head in its
    own temporary folder, with a Ray Client server, and a node joining it);
    both stopped after."""
    pytest.importorskip("ray", reason=f"the ray extra is not installed: {INSTALL}")
    with local_cluster((1, 1)) as started:
        yield started


@pytest.fixture
def head(cluster: LocalCluster) -> str:
    """The test cluster's head address, HOST:PORT."""
    return cluster.address


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
    # (the campaigns share what they see as they go: which further signatures of the two bugs come varies)
    assert {"kv-conservation.reported-errors", "seq-cap"} <= {s for bug in summary["bugs"] for s in bug["signatures"]}
    for entry in summary["counterexamples"]:
        path = Path(entry["file"])
        assert path.is_file() and tmp_path in path.parents
        assert main(["replay", str(path), "--adapter", f"{TOY}:leaky_over_slots", "--check", "property"]) == 1
    # each bug shrunk and written by the one campaign that found it first (found again by the other: not twice)
    assert sorted(p.name for p in tmp_path.glob("w*/counterexample-*.json")) == sorted(
        Path(entry["file"]).name for entry in summary["counterexamples"])


def test_from_outside_the_cluster_through_ray_client(cluster: LocalCluster, tmp_path: Path, capsys) -> None:
    """`--cluster ray://HOST:PORT` (the driver outside the cluster, through Ray
    Client): the campaigns run as tasks, their findings come here through the
    hub, each bug shrunk once."""
    assert main(["fuzz", "--adapter", f"{TOY}:leaky_over_slots", "--keep-going", "--max-examples", "300", "--seed",
                 "2", "--out", str(tmp_path), "--json", "--cluster", cluster.client]) == 1
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["workers"] == 2 and len(summary["bugs"]) == 2
    assert sorted(p.name for p in tmp_path.glob("w*/counterexample-*.json")) == sorted(
        Path(entry["file"]).name for entry in summary["counterexamples"])


def test_with_a_redis_database_the_campaigns_use_it_themselves(head: str, redis_url: str, tmp_path: Path,
                                                                capsys) -> None:
    """`--db redis://` on a cluster: the campaigns read and write the Redis
    database themselves (no database call goes through the hub); claims still
    do, so each bug is shrunk once."""
    import redis

    assert main(["fuzz", "--adapter", f"{TOY}:leaky_over_slots", "--keep-going", "--max-examples", "200", "--seed",
                 "2", "--out", str(tmp_path), "--json", "--cluster", head, "--db", redis_url]) == 1
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert set(summary["shared"]) <= {"claim", "publish"} and summary["shared"]["claim"] >= 2
    assert redis.Redis.from_url(redis_url).dbsize() > 0 and not (tmp_path / "db").exists()
    assert len(list(tmp_path.glob("w*/counterexample-*.json"))) == len(summary["counterexamples"]) >= 2


def test_verify_on_a_cluster(head: str, tmp_path: Path, capsys) -> None:
    """`verify --cluster` on another system: its campaigns and its exploration as
    tasks; a clean system passes, a buggy one fails with its files here."""
    argv = ["verify", "--fuzz-seconds", "600", "--seed", "1", "--cluster", head]
    assert main([*argv, "--adapter", f"{TOY}:ToyScheduler", "--max-examples", "40", "--out",
                 str(tmp_path / "clean")]) == 0
    out = capsys.readouterr().out
    assert "VERDICT: PASS" in out and out.count(" ok ") == 3
    assert {p.name for p in (tmp_path / "clean").iterdir()} == {"preemption-True", "preemption-False", "explore-tiny"}
    assert main([*argv, "--adapter", f"{TOY}:leaky_over_slots", "--max-examples", "300", "--out",
                 str(tmp_path / "buggy")]) == 1
    out = capsys.readouterr().out
    files = [Path(word) for word in out.split() if word.endswith(".json")]
    assert "VERDICT: FAIL (3 of 3 checks)" in out and len(files) == 3 and all(f.is_file() for f in files)


def test_a_campaign_whose_worker_is_killed_keeps_what_it_found(head: str, tmp_path: Path) -> None:
    """SIGKILL to a campaign's worker once findings are written: they stay in the
    output folder and in the summary, the run ends with the other campaign, and
    the summary names the lost one."""
    before: dict[Path, bytes] = {}
    findings_written = findings_in(tmp_path, before)
    code, out = run_killing_a_task(["fuzz", "--adapter", f"{TOY}:leaky_over_slots", "--keep-going", "--budget-seconds",
                                    "15", "--seed", "3", "--out", str(tmp_path), "--json", "--cluster", head],
                                   findings_written)
    assert code == 1
    summary = json.loads(out.splitlines()[-1])
    assert [lost["campaign"] for lost in summary["lost"]] in (["w0"], ["w1"]) and "died" in summary["lost"][0]["why"]
    assert all(path.read_bytes() == data for path, data in before.items())
    assert {str(path) for path in before} <= {entry["file"] for entry in summary["counterexamples"]}
    assert summary["examples"] > 0   # (the other campaign's)


def test_a_task_that_meets_bad_input_on_its_node_is_one_line(head: str, tmp_path: Path, capsys) -> None:
    """An adapter that imports here but not in a task (as one a node lacks a
    driver for): one error line, exit 2, not a hang or a remote traceback."""
    adapter = tmp_path / "adapter.py"
    adapter.write_text("import ray\nfrom loopcheck.sut.model_sut import ModelSUT\n\nif ray.is_initialized():\n"
                       "    raise RuntimeError('no GPU driver on this node')\nfactory = ModelSUT\n")
    assert main(["fuzz", "--adapter", f"{adapter}:factory", "--budget-seconds", "5", "--out", str(tmp_path / "out"),
                 "--cluster", head]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"loopcheck fuzz: error: --adapter: cannot import '{adapter}': RuntimeError: no GPU driver on "
                       "this node (in a task of the cluster)")


def test_the_hub_gives_a_signature_to_the_first_campaign_and_keeps_what_a_lost_one_found(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """The hub (without Ray: its methods as the actor runs them), for a campaign
    on another machine: the first claim of a signature wins, a second names the
    first; a campaign lost while shrinking leaves that finding kept as found, in
    its folder here; a published finding's file reaches the driver's folder
    when the driver next takes the hub's files."""
    monkeypatch.chdir(tmp_path)
    found = run_workload(workload(req("a", 2, 2), num_blocks=5, block_size=2, max_num_seqs=1,
                                  max_num_batched_tokens=4, prefill_chunk_size=4, **PINNED), leaky,
                         checks_for("property"))
    assert found.violation is not None
    elsewhere = tmp_path / "other-machine" / LAST_FAILURE
    write_counterexample(elsewhere, found.driver.workload(), found.violation, found.driver.trace, "test")
    w1 = Path("out/w1")
    hub = Hub(str(tmp_path), None, "out")
    checks = CheckSet("property")
    assert hub.claim(found.violation.signature, "w1", checks, str(w1 / LAST_FAILURE), elsewhere.read_bytes()) is None
    assert hub.claim(found.violation.signature, "w0", checks, "out/w0/x.json", b"") == "w1"
    ray = types.SimpleNamespace(get=lambda value: value)
    handle = types.SimpleNamespace(left=types.SimpleNamespace(remote=hub.left),
                                   take=types.SimpleNamespace(remote=hub.take))
    deliver(ray, handle)
    assert not Path("out").exists()   # (nothing published yet)
    lost = lost_campaign(ray, handle, 7, w1, "its worker died")
    assert lost.lost == "its worker died" and lost.seed == 7 and len(lost.findings) == 1
    (kept,) = lost.findings
    assert kept.counterexample == w1 / "counterexample-kv-conservation.json"
    assert kept.counterexample.read_bytes() == elsewhere.read_bytes() and not (w1 / LAST_FAILURE).exists()
    assert kept.notes == ["its campaign was lost while shrinking it: kept as found"]
    shrunk = replace(kept, counterexample=Path("out/w1/counterexample-kv-conservation-2.json"))
    hub.publish("w1", shrunk, b"shrunk")
    deliver(ray, handle)
    assert shrunk.counterexample.read_bytes() == b"shrunk"
    assert hub.left("w1") == ([shrunk], None) and hub.left("w0") == ([], None) and hub.take() == []


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:1", "--cluster 127.0.0.1:1: no Ray cluster answers"),
    ("head-without-port", "expected auto, HOST:PORT or ray://HOST:PORT"),
    ("ray://127.0.0.1:1", "--cluster ray://127.0.0.1:1: no Ray cluster answers")])
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


def findings_in(out: Path, kept: dict[Path, bytes]) -> Callable[[], bool]:
    """Whether a campaign has written counterexamples in `out` yet; their bytes
    noted in `kept` each time it is asked."""
    def written() -> bool:
        kept.update({path: path.read_bytes() for path in out.glob("w*/counterexample-*.json")})
        return bool(kept)
    return written


def run_killing_a_task(argv: list[str], ready: Callable[[], bool]) -> tuple[int, str]:
    """`loopcheck ARGV` in a process of its own and, once `ready()` holds (within
    120 s), SIGKILL to one of the Ray workers running a task; its exit code and
    standard output."""
    return run_and_strike(argv, ready, lambda proc: os.kill(task_processes()[0], signal.SIGKILL))


def run_and_strike(argv: list[str], ready: Callable[[], bool], strike: Callable[[subprocess.Popen], None]
                   ) -> tuple[int, str]:
    """`loopcheck ARGV` in a process of its own and, once `ready()` holds (within
    120 s) while a task runs, `strike(the process)`; its exit code and standard
    output."""
    proc = subprocess.Popen([sys.executable, "-m", "loopcheck.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None and task_processes(), "no task was seen running"
        strike(proc)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out


def test_ctrl_c_on_the_driver_stops_the_tasks_and_keeps_the_files(head: str, tmp_path: Path) -> None:
    """SIGINT to the driver of a fuzz run on the cluster, once findings are
    written: exit 130 at once, every task stopped, the files kept."""
    before: dict[Path, bytes] = {}
    findings_written = findings_in(tmp_path, before)
    start = time.monotonic()
    code, _ = run_and_strike(["fuzz", "--adapter", f"{TOY}:leaky_over_slots", "--keep-going", "--budget-seconds",
                              "300", "--seed", "3", "--out", str(tmp_path), "--cluster", head], findings_written,
                             lambda proc: proc.send_signal(signal.SIGINT))
    assert code == 130 and time.monotonic() - start < 120
    assert all(path.read_bytes() == data for path, data in before.items())
    deadline = time.monotonic() + 30
    while task_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert task_processes() == []


@pytest.mark.slow   # (45 s: a minute-long exploration on the cluster)
def test_a_part_whose_worker_is_killed_is_run_again(head: str, tmp_path: Path) -> None:
    """SIGKILL to the worker running a part, mid-exploration: the part runs again
    and the run ends with the certificate it would have given (the small
    preset's pinned counts on minisched, docs/benchmarks.md)."""
    seen: list[float] = []

    def two_seconds_into_a_part() -> bool:
        if not seen and task_processes():
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= 2

    code, out = run_killing_a_task(["explore", "--adapter", "examples/adapter/minisched_adapter.py:MiniSchedSUT",
                                    "--scope", "small", "--cluster", head, "--out", str(tmp_path), "--json"],
                                   two_seconds_into_a_part)
    assert code == 0
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
