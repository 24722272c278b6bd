"""turnsched: a small continuous-batching scheduler with its own API, written for
this example as a stand-in for a third-party engine (loopcheck does not know
it; examples/plain/turnsched_adapter.py wraps it).

Jobs wait in a FIFO queue and run in up to `slots` slots. Each tick spends a
budget of `tick_tokens`: first one token for every job past its prompt (oldest
first), then prompt chunks for jobs still reading theirs, then new jobs. KV
lives in a pool of `pages` pages of `page_len` positions, taken just before the
positions are written. A job that needs a page when none is free pauses the
youngest running job (which may be itself): that job gives back its pages,
keeps its tokens and, back at the head of the queue, reads its prompt and
tokens again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


class TooLarge(ValueError):
    """A job that can never fit the pool."""


@dataclass
class Job:
    job_id: str
    prompt: list[int]
    limit: int                      # tokens to generate at most
    stop_id: int | None
    tokens: list[int] = field(default_factory=list)
    read: int = 0                   # positions of prompt + tokens whose KV is written
    pages: list[int] = field(default_factory=list)

    @property
    def known(self) -> int:
        return len(self.prompt) + len(self.tokens)


@dataclass
class Report:
    """What one tick did, in order: jobs paused, jobs started, prompt chunks
    (job, start, end), tokens emitted (job, token), jobs done (job, why)."""

    paused: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    chunks: list[tuple[str, int, int]] = field(default_factory=list)
    emitted: list[tuple[str, int]] = field(default_factory=list)
    done: list[tuple[str, str]] = field(default_factory=list)


class TurnScheduler:
    def __init__(self, slots: int, tick_tokens: int, pages: int, page_len: int) -> None:
        self.slots, self.tick_tokens, self.page_len = slots, tick_tokens, page_len
        self.free_pages = deque(range(pages))
        self.pages = pages
        self.queue: deque[Job] = deque()
        self.active: list[Job] = []     # oldest start first

    def enqueue(self, job_id: str, prompt: list[int], limit: int, stop_id: int | None = None) -> None:
        need = -(-(len(prompt) + max(limit, 1) - 1) // self.page_len)
        if need > self.pages:
            raise TooLarge(f"{job_id} needs {need} pages of {self.pages}")
        self.queue.append(Job(job_id, list(prompt), limit, stop_id))

    def drop(self, job_id: str) -> None:
        for job in [j for j in self.active if j.job_id == job_id]:
            self._release(job)
            self.active.remove(job)
        self.queue = deque(j for j in self.queue if j.job_id != job_id)

    def idle(self) -> bool:
        return not self.queue and not self.active

    def tick(self, sample: Callable[[Job], int]) -> Report:
        report, budget = Report(), self.tick_tokens
        decoding: list[Job] = []
        for job in list(self.active):   # one token each for jobs past their prompt, oldest first
            if job in self.active and job.tokens and job.read == job.known - 1 and budget > 0 \
                    and self._grow(job, job.known, report):
                decoding.append(job)
                budget -= 1
        reading: list[tuple[Job, int]] = []
        for job in list(self.active):   # prompt chunks (a paused job reads its tokens again too)
            if job not in decoding and job.read < job.known and budget > 0:
                end = self._chunk(job, budget)
                if end > job.read:
                    reading.append((job, end))
                    budget -= end - job.read
        while self.queue and len(self.active) < self.slots and budget > 0 and self.free_pages:
            job = self.queue.popleft()
            self.active.append(job)
            report.started.append(job.job_id)
            end = self._chunk(job, budget)
            reading.append((job, end))
            budget -= end - job.read
        for job, end in reading:
            report.chunks.append((job.job_id, job.read, end))
            job.read = end
            if end == job.known:
                decoding.append(job)
        for job in decoding:
            job.read = job.known
            if len(job.tokens) < job.limit:
                job.tokens.append(sample(job))
                report.emitted.append((job.job_id, job.tokens[-1]))
            why = "stop" if job.tokens and job.tokens[-1] == job.stop_id else (
                "limit" if len(job.tokens) >= job.limit else None)
            if why:
                self._release(job)
                self.active.remove(job)
                report.done.append((job.job_id, why))
        return report

    def _chunk(self, job: Job, budget: int) -> int:
        """The end of the job's next prompt chunk: within the budget and the free pages."""
        end = min(job.known, job.read + budget)
        while end > job.read and self._pages_for(end) - len(job.pages) > len(self.free_pages):
            end -= 1
        while len(job.pages) < self._pages_for(end):
            job.pages.append(self.free_pages.popleft())
        return end

    def _grow(self, job: Job, positions: int, report: Report) -> bool:
        """Pages for the job's first `positions` positions, pausing the youngest
        running jobs for them; False if the job paused itself."""
        while len(job.pages) < self._pages_for(positions):
            if not self.free_pages:
                victim = self.active[-1]
                self._release(victim)
                self.active.remove(victim)
                victim.read = 0
                self.queue.appendleft(victim)
                report.paused.append(victim.job_id)
                if victim is job:
                    return False
                continue
            job.pages.append(self.free_pages.popleft())
        return True

    def _pages_for(self, positions: int) -> int:
        return -(-positions // self.page_len)

    def _release(self, job: Job) -> None:
        self.free_pages.extend(job.pages)
        job.pages = []
