"""Mutation benchmark: planted bugs in the engine's scheduler and block pool (lockstep with the
reference model sees them) and policy bugs planted in the engine and the model
at once (only the property checks can see them), each applied to a scratch copy
of the project and fuzzed there (torch engine, lockstep checks, guarded policy,
random configs by default)
with a fixed budget and seed (several config modes split the budget; time to
detection then includes the budget of the modes tried before the one that
found it).
Prints, per mutant, whether the fuzzer killed it, by which property and how
fast; then the kill rate and the median time to detection.

Usage: python -m benchmarks.mutants [--budget 20] [--seed 1] [--only NAME,...] [--configs regression,random]
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
from pathlib import Path

from loopcheck.report import table

ROOT = Path(__file__).resolve().parent.parent
SCHED = "engine/scheduler.py"
POOL = "engine/kv_cache.py"
MODEL = "model/reference.py"

# Mutants that cannot change anything a system reports, with the reason: they are
# listed and run, but the kill rate is over the others.
EQUIVALENT = {
    "victim already in batch": "the pass goes in priority-key order, so every victim candidate (strictly "
                               "less urgent) is still outside the batch: the filter never removes one",
    "no rewind": "a preempted request's chunk is reset again when it is admitted, and the rewind event is "
                 "still emitted: nothing observable changes",
}

# (name, edits), each edit (file, original text, planted text): each original must
# occur exactly once. The engine's bugs alone are seen by lockstep; a policy bug
# planted in the model and the engine at once only by the property checks.
def engine(old: str, new: str) -> tuple[tuple[str, str, str], ...]:
    return ((SCHED, old, new),)


def both(model_old: str, model_new: str, engine_old: str, engine_new: str) -> tuple[tuple[str, str, str], ...]:
    return ((MODEL, model_old, model_new), (SCHED, engine_old, engine_new))


MUTANTS = [
    ("leak on release", engine("            self.pool.release(page)\n", "            pass\n")),
    ("never-fit not rejected", engine("if need > self.cfg.num_blocks:", "if need > 2 * self.cfg.num_blocks:")),
    ("abort ignores waiting", engine("if seq.rid in self.abort_requests and seq.status != FINISHED:",
     "if seq.rid in self.abort_requests and seq.status == RUNNING:")),
    ("budget overrun", engine("if cost <= 0 or cost > self.budget or not self.stage_ok(kind):",
     "if cost <= 0 or cost > self.budget + 1 or not self.stage_ok(kind):")),
    ("victim already in batch", engine("if s.rid not in self.in_batch and eligible(s)]", "if eligible(s)]")),
    ("most urgent victim", engine("key=lambda s: s.spec.key, reverse=True)", "key=lambda s: s.spec.key)")),
    ("no rewind", engine("victim.chunk_end, victim.chunk_depth, victim.hidden = victim.frontier, 0, None",
     "victim.hidden = None")),
    ("tokens kept without snapshot", engine(
     "victim.token_ids, victim.exit_depths, victim.fingerprint = [], [], \"\"", "pass")),
    ("slot cap off by one", engine("if running >= self.cfg.max_num_seqs:", "if running > self.cfg.max_num_seqs:")),
    ("watermark ignored", engine("        if watermark:\n            spare -= self.cfg.watermark_blocks",
     "        if False:\n            spare -= self.cfg.watermark_blocks")),
    ("preflight counts the victim's slot twice", engine("len(self.running()) - 1,", "len(self.running()),")),
    ("preflight frees shared pages", engine("if p.key is None or p.holders == 1]", "]")),
    ("guard never records", engine("self.guard.add((seq.rid, budget))", "pass")),
    ("guard keyed on the wrong budget", engine("if (seq.rid, budget) in self.guard:",
     "if (seq.rid, budget + 1) in self.guard:")),
    ("guard not cleared on admission", engine("self.guard = {g for g in self.guard if g[0] != seq.rid}", "pass")),
    ("bypasses not reset", engine("seq.status, seq.bypasses = RUNNING, 0", "seq.status = RUNNING")),
    ("bypass limit off by one", engine("s.bypasses >= self.cfg.max_bypasses", "s.bypasses > self.cfg.max_bypasses")),
    ("stop token ignored", engine("if seq.spec.stop_token is not None and token[0] == seq.spec.stop_token:",
     "if False:")),
    ("one token too many", engine("elif seq.generated >= seq.spec.max_tokens:",
     "elif seq.generated > seq.spec.max_tokens:")),
    ("publish past the frontier", engine("limit = min(seq.frontier, seq.prompt_len) // self.cfg.block_size",
     "limit = min(seq.chunk_end, seq.prompt_len) // self.cfg.block_size")),
    ("whole prompt may hit", engine("for page in range((seq.prompt_len - 1) // self.cfg.block_size):",
     "for page in range(seq.prompt_len // self.cfg.block_size):")),
    ("wcpb depth skips", engine("first = last = seq.chunk_depth + 1", "first = last = min(seq.chunk_depth + 2, "
     "self.cfg.num_loops)")),
    ("snapshot kept after finish", engine("seq.snapshot = seq.hidden = None", "seq.hidden = None")),
    ("stale prefix key on eviction", ((POOL, "self.free.extend(self.cached.pop(key).blocks)",
                                       "self.free.extend(self.cached[key].blocks)"),)),
    ("both: preflight without the watermark",
     both("if self.preflight(i, v, running - {v}, watermark):", "if self.preflight(i, v, running - {v}, False):",
          "adm, self.pool.free_count() + self.pool.planes * len(freed), len(self.running()) - 1,",
          "adm, self.pool.free_count() + self.pool.planes * len(freed) + self.cfg.watermark_blocks * "
          "watermark, len(self.running()) - 1,")),
    ("both: guard never records", both("self.guard.add((i, budget))", "pass",
                                       "self.guard.add((seq.rid, budget))", "pass")),
    ("both: guard not cleared on admission",
     both("        self.guard = {g for g in self.guard if g[0] != i}\n", "",
          "self.guard = {g for g in self.guard if g[0] != seq.rid}", "pass")),
    ("both: bypasses not reset", both("bypasses=0))", "bypasses=r.bypasses))",
                                      "seq.status, seq.bypasses = RUNNING, 0", "seq.status = RUNNING")),
    ("both: bypass limit off by one",
     both("fewest_left = self.cfg.max_bypasses - max(", "fewest_left = self.cfg.max_bypasses + 1 - max(",
          "s.bypasses >= self.cfg.max_bypasses", "s.bypasses > self.cfg.max_bypasses")),
    ("both: most urgent victim first",
     both("return sorted(cands, key=lambda j: self.specs[j].key, reverse=True)",
          "return sorted(cands, key=lambda j: self.specs[j].key)",
          "key=lambda s: s.spec.key, reverse=True)", "key=lambda s: s.spec.key)")),
]


def apply(copy: Path, edits: tuple[tuple[str, str, str], ...]) -> None:
    for path, old, new in edits:
        target = copy / path
        text = target.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"benchmarks.mutants: the original text of a mutant occurs {text.count(old)} times "
                             f"in {path}")
        target.write_text(text.replace(old, new))


def fuzz(copy: Path, budget: float, seed: int, configs: str) -> dict:
    out = copy / f"fuzz-out-{configs}"
    env = {**os.environ, "PYTHONPATH": str(copy)}
    cmd = [sys.executable, "-c", "import sys; from loopcheck.cli import main; sys.exit(main(sys.argv[1:]))",
           "fuzz", "--adapter", "torch", "--configs", configs, "--policy", "guarded",
           "--budget-seconds", str(budget), "--seed", str(seed), "--out", str(out), "--json"]
    proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=budget * 6 + 300)
    summary = {}
    for line in reversed(proc.stdout.splitlines()):   # the JSON summary is the last line that is JSON
        if line.startswith("{"):
            try:
                summary = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not summary.get("counterexamples")):
        (ROOT / "benchmarks" / "mutants-errors.log").open("a").write(
            f"--- {copy} rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}\n")
    return {"rc": proc.returncode, "summary": summary, "stderr": proc.stderr[-300:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=20.0, help="fuzz seconds per mutant")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="comma-separated mutant names")
    parser.add_argument("--configs", default="random",
                        help="config modes to fuzz in turn, the budget split between them")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or m[0] in args.only.split(",")]
    rows, times, killed = [], [], 0
    with tempfile.TemporaryDirectory(prefix="loopcheck-mutants-") as tmp:
        for name, edits in chosen:
            copy = Path(tmp) / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info",
                                                                       ".hypothesis", ".pytest_cache"))
            apply(copy, edits)
            modes = args.configs.split(",")
            offset = 0.0     # budget spent in earlier config modes
            for configs in modes:   # the budget split between the config modes, in order
                result = fuzz(copy, args.budget / len(modes), args.seed, configs)
                found = result["summary"].get("counterexamples") or []
                if found or result["rc"] != 0:
                    break
                offset += args.budget / len(modes)
            if result["rc"] == 1 and found:
                killed += 1
                t = offset + found[0]["time_to_failure"]
                times.append(t)
                rows.append([name, "killed", found[0]["property"], f"{t:.1f}", found[0]["requests"]])
            elif result["rc"] == 0:
                rows.append([name, "equivalent" if name in EQUIVALENT else "SURVIVED", EQUIVALENT.get(name, ""),
                             "", ""])
            else:
                rows.append([name, f"error rc={result['rc']}", result["stderr"].splitlines()[-1:] or "", "", ""])
            print(f"  {name}: {rows[-1][1]}", file=sys.stderr, flush=True)
    print(table(["mutant", "result", "property", "seconds to detect", "requests"], rows))
    median = f"{statistics.median(times):.1f}s" if times else "n/a"
    counted = len([m for m in chosen if m[0] not in EQUIVALENT]) or 1
    print(f"killed {killed}/{counted} non-equivalent ({100 * killed / counted:.0f}%; "
          f"{len(chosen) - counted} equivalent), median detection {median}, "
          f"budget {args.budget:g}s each, seed {args.seed}")


if __name__ == "__main__":
    main()
