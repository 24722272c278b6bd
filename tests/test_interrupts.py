"""Ctrl-C and SIGTERM stop a long run cleanly: the summary so far, the reproduce
line, exit 130 / 143, no traceback, before the run's own end (no bound in
seconds: a loaded machine is slow, not wrong; a minute's wait only keeps a
broken run from hanging the suite)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopcheck.model.workload import save_workload
from loopcheck.runctl.pool import in_processes
from loopcheck.runctl.stop import StopRequest, Terminated
from tests.helpers import five_requests


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_fuzz_stops_cleanly(sig, code, tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "loopcheck.cli", "fuzz", "--adapter", "model", "--budget-seconds",
                             "120", "--seed", "3", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    while not any(line.startswith("[") for line in lines):   # the first progress line
        lines.append(proc.stderr.readline())
        assert lines[-1], "the run ended before its first progress line"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert "Traceback" not in err and "INTERRUPTED" in err and "reproduce: loopcheck fuzz" in err
    assert "examples" in out and "before the interrupt" in out


def test_a_parallel_exploration_stops_cleanly_and_leaves_no_worker(tmp_path) -> None:
    """Ctrl-C during `explore --workers 2`: exit 130 and one line, no traceback
    from the parent or a worker, and no worker process left running."""
    family = tmp_path / "five.json"
    save_workload(five_requests(), family)
    proc = subprocess.Popen([sys.executable, "-m", "loopcheck.cli", "explore", str(family), "--spread", "30",
                             "--workers", "2", "--max-states", "1000000000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        line = ""
        while not line.startswith("["):   # the first progress line: the workers are busy
            line = proc.stderr.readline()
            assert line, "the run ended before its first progress line"
        workers = children(proc.pid)
        assert len(workers) == 2
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:   # a failed check: end the run and its workers
            proc.terminate()
            proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err and "interrupted (SIGINT)" in err
    assert not [pid for pid in workers if running(pid)]


def running(pid: int) -> bool:
    """Is process `pid` alive (neither gone nor a zombie waiting to be reaped)?"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_second_signal_stops_at_once_where_no_safe_point_comes() -> None:
    with StopRequest.deferred():
        StopRequest.request(KeyboardInterrupt())   # recorded for the next safe point
        with pytest.raises(Terminated):
            StopRequest.request(Terminated())
    StopRequest.clear()


def test_ctrl_c_twice_stops_a_run_stuck_in_the_system(tmp_path) -> None:
    """The system spins in its first step: one Ctrl-C waits for a safe point that
    only the hang watchdog would bring; a second stops the run at once, cleanly:
    before the watchdog, so no hang is reported."""
    spins = f"{Path(__file__).parent / 'broken_adapters.py'}:Spins"
    marker = tmp_path / "spinning"
    proc = subprocess.Popen([sys.executable, "-m", "loopcheck.cli", "fuzz", "--adapter", spins, "--budget-seconds",
                             "60", "--seed", "3", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LOOPCHECK_TEST_SPINNING": str(marker)})
    while not marker.exists():   # the system is in its first step, spinning, and the watchdog is armed
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None   # the first only asked
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err and "INTERRUPTED" in err, err
    assert "hang" not in out + err and not list(tmp_path.glob("counterexample-*"))


def _nap(seconds: float) -> float:
    if seconds < 0:
        raise ValueError("a failed job")
    time.sleep(seconds)
    return seconds


def test_work_in_processes_comes_back_in_job_order_and_a_failure_stops_every_worker() -> None:
    """`runctl.pool.in_processes`: results in job order whatever order the jobs
    finish in (each heard as it finishes); a failed job raises at once, without
    waiting for a job still running, and leaves no worker running."""
    heard: list[int] = []
    assert in_processes(_nap, [0.6, 0.0, 0.3], 3, done=lambda k, _: heard.append(k)) == [0.6, 0.0, 0.3]
    assert heard == [1, 2, 0]
    start = time.monotonic()
    with pytest.raises(ValueError, match="a failed job"):
        in_processes(_nap, [120.0, -1.0], 2)
    assert time.monotonic() - start < 120
    assert not [pid for pid in children(os.getpid()) if running(pid)]
