"""Mutation benchmark: planted bugs in the engine's scheduler and block pool (lockstep with the
reference model sees them) and policy bugs planted in the engine and the model
at once (only the property checks can see them), each planted as the fuzz
process imports the module (the files are not touched) and fuzzed (torch engine,
lockstep checks, guarded policy, random configs by default); with --target vllm, bugs planted in vLLM's own
scheduler, KV cache manager and block pool (as the fuzz process imports them:
the installed vLLM is not touched), fuzzed through the vLLM adapter with the
property checks, its two known bugs kept out of the way (`--shape
oversized=off --ignore priority-inversion`, so a mutant seen only as a priority
inversion survives; pass `--shape oversized=off,spec=off` for the KV transfer
mutants and `--shape oversized=off,kv_transfer=off` for the speculative
decoding ones, as the two together meet the queue-head stall's face of
examples/vllm/kv_load_spec_stall.json; `--shape
oversized=off,spec=off,async_scheduling=off` for the pause mutants, and for the
async scheduling ones every other deployment feature off, as async scheduling
meets the fenced-free self-preemption of
examples/vllm/fenced_free_self_preemption.json); with --target lmdeploy, bugs planted in LMDeploy's paging code
(allocator, prefix-cache trie, sequence states, scheduler), fuzzed through the
LMDeploy adapter with the property checks; with --target sglang, bugs planted in SGLang's
allocator, radix cache, prefill adder and requests, fuzzed through the SGLang adapter with
its shipped findings ignored (SGLANG_KNOWN). Each with a fixed budget and seed (several config modes
split the budget; time to detection then includes the budget of the modes
tried before the one that found it).
Prints, per mutant, whether the fuzzer killed it, by which property and how
fast; then the kill rate and the median time to detection. With --explore
SCOPE, beside it, the same for a scoped exploration of the same seconds (the
same ignored findings; the scope's prompts larger than its smallest pool left
out, as fuzz leaves out oversized requests for vLLM): killed (and when its
shortest finding was met), survived with a certificate of the whole scope, or
survived with the exploration incomplete.

Usage: python -m benchmarks.mutants [--target engine|vllm|lmdeploy|sglang] [--budget 20] [--seed 1] [--only NAME,...]
                                    [--configs regression,random] [--shape NAME=on|off,...] [--ignore SIG,...]
                                    [--explore SCOPE]
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from loopcheck.explorer.scope import load_scope
from loopcheck.report import table

ROOT = Path(__file__).resolve().parent.parent
SCHED = "loopcheck.engine.scheduler"
POOL = "loopcheck.engine.kv_cache"
MODEL = "loopcheck.model.reference"

# Mutants that cannot change anything a system reports, with the reason: they are
# listed and run, but the kill rate is over the others.
EQUIVALENT = {
    "victim already in batch": "the pass goes in priority-key order, so every victim candidate (strictly "
                               "less urgent) is still outside the batch: the filter never removes one",
    "no rewind": "a preempted request's chunk is reset again when it is admitted, and the rewind event is "
                 "still emitted: nothing observable changes",
    "nothing planted": "the engine as installed, the control: it must survive the same campaign, else the kills "
                       "above may be its own bugs",
}

# (name, edits), each edit (module, original text, planted text): each original must
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


VLLM_CORE = "vllm.v1.core."
POOL_V, SCHED_V, MANAGER_V, TYPES_V, UTILS_V = (VLLM_CORE + m for m in (
    "block_pool", "sched.scheduler", "kv_cache_manager", "single_type_kv_cache_manager", "sched.utils"))

# (name, edits), each edit (module, original text, planted text), planted in vLLM 0.33.0 as it is imported.
VLLM_MUTANTS = [
    ("nothing planted", ()),
    ("free keeps the ref count", ((POOL_V, "            block.ref_cnt -= 1\n            if block.ref_cnt == 0:",
                                   "            if block.ref_cnt == 1:"),)),
    ("eviction keeps the hash", ((POOL_V, "evicted_hashes = self._remove_cached_block_hashes(block)",
                                  "evicted_hashes = []"),)),
    ("preemption keeps computed tokens", ((SCHED_V, "        request.status = RequestStatus.PREEMPTED\n"
                                           "        request.num_computed_tokens = 0\n",
                                           "        request.status = RequestStatus.PREEMPTED\n"),)),
    ("running requests may pass the budget", ((SCHED_V, "num_new_tokens, token_budget, input_budget - draft_slots\n",
                                               "num_new_tokens, token_budget + 1, input_budget - draft_slots + 1\n"),)),
    ("admissions may pass the budget",
     ((SCHED_V, "request_token_budget = min(token_budget, input_budget - draft_slots)",
       "request_token_budget = min(token_budget, input_budget - draft_slots) + 1"),)),
    ("most urgent victim", ((SCHED_V, "preempted_req = max(\n                            self.running,",
                             "preempted_req = min(\n                            self.running,"),)),
    ("FCFS victim the oldest running", ((SCHED_V, "                    else:\n"
                                         "                        preempted_req = self.running.pop()\n",
                                         "                    else:\n"
                                         "                        preempted_req = self.running.pop(0)\n"),)),
    ("stop token ignored", ((UTILS_V, "if last_token_id in (sampling_params.stop_token_ids or ()):", "if False:"),)),
    ("one token too many", ((UTILS_V, "or request.num_output_tokens >= request.max_tokens",
                             "or request.num_output_tokens > request.max_tokens"),)),
    ("whole prompt may hit", ((MANAGER_V, "            max_cache_hit_length = request.num_tokens - 1\n"
                               "        computed_blocks",
                               "            max_cache_hit_length = request.num_tokens\n        computed_blocks"),)),
    ("slot cap off by one", ((SCHED_V, "if num_running >= self.max_num_active_reqs:",
                              "if num_running > self.max_num_active_reqs:"),)),
    ("one block short", ((TYPES_V, "        req_blocks = self.req_to_blocks[request_id]\n"
                          "        num_required_blocks = cdiv(num_tokens, self.block_size)",
                          "        req_blocks = self.req_to_blocks[request_id]\n"
                          "        num_required_blocks = num_tokens // self.block_size"),)),
    ("partial block cached", ((TYPES_V, "num_full_blocks = min(num_tokens, num_hashed_tokens) // self.block_size",
                               "num_full_blocks = cdiv(min(num_tokens, num_hashed_tokens), self.block_size)"),)),
    ("abort leaves waiting requests queued", ((SCHED_V, "                waiting_requests_to_remove.append(request)",
                                               "                pass"),)),
    # the deployment features' paths (LoRA, structured output)
    ("max_loras skip off by one", ((SCHED_V, "len(scheduled_loras) == self.lora_config.max_loras",
                                    "len(scheduled_loras) > self.lora_config.max_loras"),)),
    ("an admitted request's LoRA is not counted", ((SCHED_V, "                    scheduled_loras.add("
                                                    "request.lora_request.lora_int_id)", "                    pass"),)),
    ("a request still compiling its grammar is scheduled",
     ((SCHED_V, "            if not struct_output_req or struct_output_req.grammar is None:\n"
                "                return False",
       "            if not struct_output_req:\n                return False"),)),
    ("skipped requests are not put back",
     ((SCHED_V, "                self.waiting.prepend_requests(step_skipped_waiting)", "                pass"),)),
    # the KV transfer path (a KV connector's asynchronous loads)
    ("a loading request's blocks are cached at once",
     ((SCHED_V, "delay_cache_blocks=load_kv_async,", "delay_cache_blocks=False,"),)),
    ("a failed load is taken as loaded",
     ((SCHED_V, "                request.num_computed_tokens = idx * self.block_size",
       "                request.num_computed_tokens = req_num_computed_tokens"),)),
    ("an ended load is not noticed",
     ((SCHED_V, "                self.finished_recving_kv_req_ids.add(req_id)", "                pass"),)),
    ("an aborted load's blocks are freed at once",
     ((SCHED_V, "                delay_free_blocks = (\n                    self.deferred_loads.pop(",
       "                delay_free_blocks = False and (\n                    self.deferred_loads.pop("),)),
    # the speculative decoding path (draft tokens verified in the batch)
    ("drafts are not cut to the budget",
     ((SCHED_V, "spec_token_ids = spec_token_ids[:num_scheduled_spec_tokens]", "spec_token_ids = spec_token_ids"),)),
    ("rejected drafts are not rolled back",
     ((SCHED_V, "request.num_computed_tokens -= num_rejected", "request.num_computed_tokens -= 0"),)),
    # the operator's pause (`set_pause_state`)
    ("paused all: running requests keep their budget",
     ((SCHED_V, "            # Do not schedule any requests when paused.\n            token_budget = 0",
       "            # Do not schedule any requests when paused.\n            pass"),)),
    ("paused new: the waiting queue is still taken",
     ((SCHED_V, "if not request_queue and self._pause_state == PauseState.UNPAUSED:",
       "if not request_queue and self._pause_state != PauseState.PAUSED_ALL:"),)),
    # asynchronous scheduling (a batch scheduled before the last one's outputs came; the AsyncScheduler)
    ("async: a preemption keeps the output placeholders",
     ((SCHED_V, "        request.num_output_placeholders = 0\n        request.num_preemptions += 1\n",
       "        request.num_preemptions += 1\n"),)),
    ("async: no placeholder for the token in flight",
     (("vllm.v1.core.sched.async_scheduler", "            request.num_output_placeholders += (",
       "            request.num_output_placeholders += 0 * ("),)),
    ("async: a step is scheduled past max_tokens",
     ((SCHED_V, "                and request.num_computed_tokens + 2 - request.num_output_placeholders\n"
                "                >= request.num_prompt_tokens + request.max_tokens",
       "                and request.num_computed_tokens + 1 - request.num_output_placeholders\n"
                "                >= request.num_prompt_tokens + request.max_tokens"),)),
    ("async: a fenced victim is preempted (the fix of #49674 undone)",
     ((SCHED_V, "                    if not self._request_blocks_can_be_freed(preempted_req):\n"
                "                        break\n", ""),)),
    ("async: deferred frees are never drained",
     ((SCHED_V, "            self._drain_deferred_frees()\n", "            pass\n"),)),
    ("paused new: requests holding KV blocks are held too",
     ((SCHED_V, "                request_queue = self.kv_holding_waiting\n",
       "                request_queue = self.kv_holding_waiting if not self._pause_state else None\n"),)),
]

LMDEPLOY_PAGING = "lmdeploy.pytorch.paging."
ALLOC_L, TRIE_L, STATES_L, SCHED_L = (LMDEPLOY_PAGING + m for m in (
    "block_manager.base_block_manager", "block_trie.trie", "seq_states.states", "scheduler"))

# (name, edits), planted in LMDeploy 0.18.0's paging code (allocator, prefix-cache trie, sequence states,
# scheduler) as it is imported.
LMDEPLOY_MUTANTS = [
    ("nothing planted", ()),
    ("free keeps the ref count", ((ALLOC_L, "        self.add_ref_count(blocks, -1)",
                                   "        self.add_ref_count(blocks, 0)"),)),
    ("dedup frees the shared block", ((TRIE_L, "                    free_blocks.append(block_id)",
                                       "                    free_blocks.append(child.block_id)"),)),
    ("a hit takes no reference", ((TRIE_L, "            self.allocator.add_ref_count(matched_block_ids, 1)",
                                   "            self.allocator.add_ref_count(matched_block_ids, 0)"),)),
    ("a chunk publishes its later pages",
     ((TRIE_L, "            num_valid_ids = min(num_valid_ids, seq.kv_token_limit)",
       "            num_valid_ids = num_valid_ids"),)),
    ("released blocks keep their positions", ((STATES_L, "        seq.set_step(0)", "        pass"),)),
    ("growth takes running sequences' blocks", ((SCHED_L, "                self.hanging + self.waiting,",
                                                 "                self.hanging + self.waiting + running,"),)),
    ("a block with one holder left is freed", ((ALLOC_L, "        freed_blocks = blocks[ref_count == 0]",
                                                "        freed_blocks = blocks[ref_count <= 1]"),)),
]


SGLANG_SRT = "sglang.srt."
PAGED_S, RADIX_S, POLICY_S, BATCH_S, SCHED_S, GRAMMAR_S = (SGLANG_SRT + m for m in (
    "mem_cache.allocator.paged", "mem_cache.unified_radix_cache", "managers.schedule_policy",
    "managers.schedule_batch", "managers.scheduler", "constrained.grammar_manager"))

# (name, edits), planted in SGLang 0.5.23's allocator, radix cache, prefill adder and requests as they are
# imported; the campaign ignores the SGLang findings shipped in examples/sglang/ (SGLANG_KNOWN).
SGLANG_MUTANTS = [
    ("nothing planted", ()),
    ("a freed page is lost", ((PAGED_S, "            self._release_page_ids(page_ids)\n",
                               "            self._release_page_ids(page_ids[1:])\n"),)),
    ("a chunk publishes its uncomputed positions",
     ((RADIX_S, "        token_ids = req.full_untruncated_fill_ids[:up_to]",
       "        token_ids = req.full_untruncated_fill_ids"),)),
    ("a partial page is cached", ((RADIX_S, "        radix_key = radix_key.page_aligned(self.page_size)",
                                   "        radix_key = radix_key"),)),
    ("a chunk overruns the budget by a page",
     ((POLICY_S, "                extend_len = chunk_tokens_limit // self.page_size * self.page_size",
       "                extend_len = (chunk_tokens_limit // self.page_size + 1) * self.page_size"),)),
    ("one token past max_new_tokens", ((BATCH_S, "if len(self.output_ids) >= self.sampling_params.max_new_tokens:",
                                        "if len(self.output_ids) > self.sampling_params.max_new_tokens:"),)),
    ("stop tokens are ignored", ((BATCH_S, "matched_eos |= token_id in self.sampling_params.stop_token_ids",
                                  "matched_eos |= False"),)),
    # the structured-output path (SGLang's grammar queue)
    ("a request whose grammar is ready is not queued",
     ((SCHED_S, "            for req in ready_grammar_requests:\n                self._add_request_to_queue(req)",
       "            for req in ready_grammar_requests:\n                pass"),)),
    ("a grammar still compiling is taken as ready",
     ((GRAMMAR_S, "                    if req.grammar.done():", "                    if True:"),)),
    ("a request whose grammar is ready is queued twice",
     ((SCHED_S, "            for req in ready_grammar_requests:\n                self._add_request_to_queue(req)",
       "            for req in ready_grammar_requests:\n                self._add_request_to_queue(req)\n"
       "                self._add_request_to_queue(req)"),)),
]
# SGLang's idle stall (examples/sglang/idle_stall.json) shows as grammar.ready-idle on a request with a grammar
SGLANG_KNOWN = "abort.not-ended,stall.state-repeats,work.token-uncomputed,grammar.ready-idle"


TARGETS = {"engine": MUTANTS, "vllm": VLLM_MUTANTS, "lmdeploy": LMDEPLOY_MUTANTS, "sglang": SGLANG_MUTANTS}


def planted(source: str, edits: list[tuple[str, str]], where: str) -> str:
    """`source` with each (original, planted) edit made; SystemExit unless each
    original occurs exactly once."""
    for old, new in edits:
        if source.count(old) != 1:
            raise SystemExit(f"benchmarks.mutants: the original text of a mutant occurs {source.count(old)} times "
                             f"in {where}")
        source = source.replace(old, new)
    return source


class PlantOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the modules named in `edits` (module -> [(original, planted)]) from
    their own files with the edits made (in this process only)."""

    def __init__(self, edits: dict[str, list[tuple[str, str]]]) -> None:
        self.edits = edits

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.edits:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None:
            raise SystemExit(f"benchmarks.mutants: no module {fullname} to plant a mutant in")
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        origin = module.__spec__.origin
        source = planted(Path(origin).read_text(), self.edits[module.__name__], module.__name__)
        exec(compile(source, origin, "exec"), module.__dict__)


def plant_on_import(edits: list[list[str]]) -> None:
    """Install `PlantOnImport` for edits [module, original, planted]."""
    by_module: dict[str, list[tuple[str, str]]] = {}
    for module, old, new in edits:
        by_module.setdefault(module, []).append((old, new))
    sys.meta_path.insert(0, PlantOnImport(by_module))


CLI_MAIN = "import sys; from loopcheck.cli import main; sys.exit(main(sys.argv[1:]))"
PLANTED_MAIN = ("import json, os; from benchmarks.mutants import plant_on_import; "
             "plant_on_import(json.loads(os.environ['LOOPCHECK_MUTANT'])); " + CLI_MAIN)


# the fuzz shape of a target whose known bugs a feature would meet (vLLM's queue-head stall: oversized requests)
DEFAULT_SHAPES = {"vllm": "oversized=off"}


KNOWN = {"vllm": "priority-inversion", "sglang": SGLANG_KNOWN}   # the known findings a target's runs ignore


def adapter_flags(target: str, ignore: str) -> list[str]:
    """The system of the target and the findings its runs ignore: its known
    ones and `ignore` (comma-separated)."""
    ignored = ",".join(filter(None, (KNOWN.get(target, ""), ignore)))
    adapter = target if target in ("vllm", "lmdeploy", "sglang") else "torch"
    return ["--adapter", adapter, *(["--ignore", ignored] if ignored else [])]


def fuzz(scratch: Path, budget: float, seed: int, configs: str, edits: tuple, target: str, shape: str,
         ignore: str) -> dict:
    """One fuzz campaign in a subprocess, `edits` planted as it imports the
    modules they name (this checkout's engine and model, or the installed vLLM),
    workloads of `shape`, its output under `scratch`."""
    shaped = ["--shape", shape] if shape else []
    return planted_run(scratch, edits, budget, ["fuzz", *adapter_flags(target, ignore), *shaped, "--configs", configs,
                                                "--policy", "guarded", "--budget-seconds", str(budget), "--seed",
                                                str(seed), "--out", str(scratch / f"fuzz-out-{configs}")])


def explore(scratch: Path, budget: float, scope: str, edits: tuple, target: str, ignore: str) -> dict:
    """Scoped exploration of `budget` seconds in a subprocess, `edits` planted
    as in `fuzz`: the scope without the prompts larger than its smallest pool
    (as fuzz's shape leaves out oversized requests for vLLM), its shortest
    finding (with when it was met) or its verdict, its output under `scratch`."""
    spec = load_scope(scope)
    positions = min(cfg.num_blocks * cfg.block_size for cfg in spec.config_list({}))
    fitting = replace(spec, prompts=tuple(p for p in spec.prompts if len(p) < positions))
    path = scratch / "scope.json"
    path.write_text(json.dumps(fitting.to_json()))
    return planted_run(scratch, edits, budget, ["explore", *adapter_flags(target, ignore), "--scope", str(path),
                                                "--max-seconds", str(budget), "--out", str(scratch / "explore-out")])


def planted_run(scratch: Path, edits: tuple, budget: float, argv: list[str]) -> dict:
    """`loopcheck ARGV --json` in a subprocess with `edits` planted: its exit
    code, its JSON summary, the end of its stderr (kept in mutants-errors.log
    when it neither passed nor found)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOOPCHECK_MUTANT": json.dumps(edits)}
    cmd = [sys.executable, "-c", PLANTED_MAIN, *argv, "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=budget * 6 + 300)
    summary = {}
    for line in reversed(proc.stdout.splitlines()):   # the JSON summary is the last line that is JSON
        if line.startswith("{"):
            try:
                summary = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    found = summary.get("counterexamples") or summary.get("findings")
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not found and summary.get("tally", {}).get(
            "complete", True)):
        (ROOT / "benchmarks" / "mutants-errors.log").open("a").write(
            f"--- {scratch} rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}\n")
    return {"rc": proc.returncode, "summary": summary, "stderr": proc.stderr[-300:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", choices=tuple(TARGETS), default="engine",
                        help="plant bugs in loopcheck's torch engine (default), vLLM's scheduler, LMDeploy's "
                             "paging or SGLang's scheduler and cache")
    parser.add_argument("--budget", type=float, default=20.0, help="fuzz seconds per mutant")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="comma-separated mutant names")
    parser.add_argument("--configs", default="random",
                        help="config modes to fuzz in turn, the budget split between them")
    parser.add_argument("--shape", metavar="NAME=on|off,...",
                        help="the campaigns' workload shape (default: oversized=off for vLLM, so that its queue-head "
                             "stall is out of the way; else every feature on)")
    parser.add_argument("--ignore", default="", metavar="SIGNATURE,...",
                        help="known findings the campaigns ignore besides the target's own (a known bug a shape "
                             "meets sooner)")
    parser.add_argument("--explore", metavar="SCOPE",
                        help="also explore this scope (a preset or a file) for the same seconds per mutant: a "
                             "column beside fuzz's")
    args = parser.parse_args()
    mutants = TARGETS[args.target]
    chosen = [m for m in mutants if not args.only or m[0] in args.only.split(",")]
    rows, times, killed = [], [], 0
    explored: list[float | None] = []   # seconds to the exploration's finding per mutant (None: none)
    with tempfile.TemporaryDirectory(prefix="loopcheck-mutants-") as tmp:
        for name, edits in chosen:
            scratch = Path(tmp) / "scratch"   # the campaign's output (the edits are planted on import)
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir()
            modes = args.configs.split(",")
            offset = 0.0     # budget spent in earlier config modes
            for configs in modes:   # the budget split between the config modes, in order
                result = fuzz(scratch, args.budget / len(modes), args.seed, configs, edits, args.target,
                              args.shape if args.shape is not None else DEFAULT_SHAPES.get(args.target, ""),
                              args.ignore)
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
            if args.explore:
                cells, seconds = explore_cells(explore(scratch, args.budget, args.explore, edits, args.target,
                                                       args.ignore))
                rows[-1] += cells
                explored.append(seconds if name not in EQUIVALENT else None)
            print(f"  {name}: {rows[-1][1]}", file=sys.stderr, flush=True)
    extra = ["explore", "explore property", "explore seconds"] if args.explore else []
    print(table(["mutant", "result", "property", "seconds to detect", "requests", *extra], rows))
    median = f"{statistics.median(times):.1f}s" if times else "n/a"
    counted = len([m for m in chosen if m[0] not in EQUIVALENT]) or 1
    print(f"killed {killed}/{counted} non-equivalent ({100 * killed / counted:.0f}%; "
          f"{len(chosen) - counted} equivalent), median detection {median}, "
          f"budget {args.budget:g}s each, seed {args.seed}")
    if args.explore:
        found = [t for t in explored if t is not None]
        print(f"explore ({args.explore}, the prompts larger than its smallest pool left out): killed "
              f"{len(found)}/{counted} non-equivalent, median detection "
              f"{f'{statistics.median(found):.1f}s' if found else 'n/a'}, {args.budget:g}s each")


def explore_cells(result: dict) -> tuple[list[str], float | None]:
    """The explore columns of a mutant's row (verdict, property, seconds) and
    the seconds to its finding (None: none)."""
    summary, rc = result["summary"], result["rc"]
    if rc == 1 and summary.get("findings"):
        finding = summary["findings"][0]
        return ["killed", finding["property"], f"{finding['seconds']:.1f}"], finding["seconds"]
    if rc == 0:
        return ["survived (certificate)", "", ""], None
    if rc == 1 and not summary.get("tally", {}).get("complete", True):
        return ["survived (incomplete)", "", ""], None
    return [f"error rc={rc}", (result["stderr"].splitlines() or [""])[-1], ""], None


if __name__ == "__main__":
    main()
