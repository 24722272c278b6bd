"""A run drawn as a per-request timeline: a row per request, coloured by its
status after each step (waiting, running, preempted; nothing before it arrives or
after it finishes), its prefill and decode work per step, a mark at each
preemption and resumption (so that both in one step show), an arrow from each
preemption's requester to its victim, the repeating cycle of a livelock shaded,
the pages the prefix cache held (where the system reports them: red while a
page was never computed) and the KV blocks held beneath. Read from the events
(and the reported cache) alone, so it draws any system's run (`loopcheck replay
--plot`, and each counterexample a campaign writes)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Event, Preempt
from loopcheck.model.workload import Workload
from loopcheck.sut.view import AFTER, FINISHED, PREEMPTED, RUNNING, WAITING, TraceView

COLOURS = {WAITING: "#d9d9d9", RUNNING: "#9ecae1", PREEMPTED: "#fdae6b"}
# per event kind, where in its step its marker goes (a preemption to the left, a resumption to the right) and
# how it is drawn
MARKS = {"preempt": (-0.25, {"marker": "x", "markersize": 6, "color": "#a63603"}),
         "resume": (0.25, {"marker": "^", "markersize": 5, "color": "#6a51a3"})}
MAX_STEPS_DRAWN = 400   # a longer run is drawn up to its cycle's second repetition, or cut here


@dataclass(frozen=True)
class Timeline:
    """What a timeline shows: the workload, each step's events and blocks held
    after it, the cycle of a livelock ({"start", "length"} in steps, or None),
    the step a violation showed in (None: none), the headline (what the run
    showed) and, where the system reports its prefix cache, the pages it held
    after each step."""

    workload: Workload
    events: list[list[Event]]
    held: list[int]
    cycle: dict | None
    marked_step: int | None
    headline: str
    cached: list[tuple[tuple[int, ...], ...]] | None = None   # the prefix cache's pages after each step (if known)


def statuses(run: Timeline) -> dict[str, list[str | None]]:
    """Per request, its status after each step (None before it arrives and after
    the step it finished in; in that step, the last status it had before
    finishing)."""
    now: dict[str, str | None] = {r.rid: None for r in run.workload.requests}
    rows: dict[str, list[str | None]] = {rid: [] for rid in now}
    for events in run.events:
        last = {rid: status for rid, status in now.items() if status != FINISHED}
        for e in events:
            if e.rid in now:
                now[e.rid] = AFTER.get(e.kind, now[e.rid])
                if now[e.rid] != FINISHED:
                    last[e.rid] = now[e.rid]
        for rid, status in now.items():
            rows[rid].append(last.get(rid) if status == FINISHED else status)
    return rows


CACHE_ROWS_DRAWN = 12   # pages of the prefix cache drawn at most (those never computed first)
COMPUTED, UNCOMPUTED = "computed", "not computed"
CACHE_COLOURS = {COMPUTED: "#a1d99b", UNCOMPUTED: "#cb181d"}


def cache_rows(run: Timeline, steps: int) -> list[tuple[str, list[str | None]]]:
    """Per page the prefix cache held in the first `steps` steps (in the order
    they were first cached): a label naming the request whose tokens it is (the
    one that worked on it in that step, else the first) and its index, and per
    step whether it was cached then and computed by then (`COMPUTED`,
    `UNCOMPUTED`, None: not cached), as the `cached-page` rule judges it; those
    never computed first, CACHE_ROWS_DRAWN at most."""
    if not run.cached:
        return []
    bs = run.workload.config.block_size
    view = TraceView(bs, keep_pages=True)
    for spec in run.workload.requests:
        view.submit(spec)
    rows: dict[tuple[int, ...], tuple[str, list[str | None]]] = {}
    for t, (events, pages) in enumerate(zip(run.events[:steps], run.cached[:steps], strict=False)):
        view.fold([e for e in events if e.rid in view.requests])
        for page in pages:
            if page not in rows:
                owners = sorted(view.requests.values(), key=lambda r: r.spec.rid not in view.worked)
                owner = next((r.spec.rid for r in owners if r.content(len(page)) == page), "?")
                rows[page] = (f"{owner} page {len(page) // bs - 1}", [None] * steps)
            rows[page][1][t] = COMPUTED if hash(page) in view.computed_pages else UNCOMPUTED
    ordered = sorted(rows.values(), key=lambda row: UNCOMPUTED not in row[1])   # (stable: first cached first)
    return ordered[:CACHE_ROWS_DRAWN]


def marked(run: Timeline, steps: int) -> list[tuple[float, str, str]]:
    """(where on the step axis, request, event kind) of each preemption and
    resumption in the first `steps` steps: marked even where the status after
    the step hides them (preempted and resumed, or resumed and preempted, in
    one step), a preemption left of its step's centre, a resumption right."""
    requests = {r.rid for r in run.workload.requests}
    return [(t + MARKS[e.kind][0], e.rid, e.kind) for t, events in enumerate(run.events[:steps]) for e in events
            if e.kind in MARKS and e.rid in requests]


def draw_cache(ax: object, pages: list[tuple[str, list[str | None]]]) -> list[object]:
    """The prefix cache's pages (`cache_rows`) as rows of the steps each was
    held; the legend's entries for them (one legend for the figure, so that
    none overlaps another)."""
    from matplotlib.patches import Patch

    for k, (_, row) in enumerate(pages):
        for t, state in enumerate(row):
            if state is not None:
                ax.barh(len(pages) - 1 - k, 1, left=t - 0.5, height=0.6, color=CACHE_COLOURS[state], linewidth=0)
    ax.set_yticks(range(len(pages)), [label for label, _ in reversed(pages)], fontsize=8)
    ax.set_ylim(-0.7, len(pages) - 0.3)
    ax.set_ylabel("prefix cache\n(pages held)")
    return [Patch(color=CACHE_COLOURS[s], label=f"cached, {s}") for s in (COMPUTED, UNCOMPUTED)]


def check_matplotlib(flag: str) -> None:
    """WorkloadError naming `flag` when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise WorkloadError(f"{flag}: needs matplotlib (python3 -m pip install matplotlib)") from exc


def drawn_steps(run: Timeline) -> int:
    """How many steps to draw: all, up to MAX_STEPS_DRAWN; a livelock up to the
    end of its cycle's second period (its repetition is the point)."""
    steps = len(run.events)
    if run.cycle:
        steps = min(steps, run.cycle["start"] + 2 * run.cycle["length"] + 2)
    return min(steps, MAX_STEPS_DRAWN)


def draw(run: Timeline, path: Path | str) -> None:
    """Write `run` as a PNG to `path` (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    steps = drawn_steps(run)
    requests = run.workload.requests
    rows = statuses(run)
    y = {r.rid: len(requests) - 1 - k for k, r in enumerate(requests)}
    width = min(16.0, 7 + 0.06 * steps)
    pages = cache_rows(run, steps)
    heights = [max(2, len(requests)), *([max(1.5, 0.6 * len(pages))] if pages else []), 2]
    fig, axes = plt.subplots(len(heights), 1, figsize=(width, 1.2 + 0.45 * sum(heights)), sharex=True,
                             gridspec_kw={"height_ratios": heights})
    top, bottom = axes[0], axes[-1]
    cached = draw_cache(axes[1], pages) if pages else []
    for rid, row in rows.items():
        for t, status in enumerate(row[:steps]):
            if status is not None:
                top.barh(y[rid], 1, left=t - 0.5, height=0.6, color=COLOURS[status], linewidth=0)
    for t, events in enumerate(run.events[:steps]):
        for e in events:
            if e.rid not in y:
                continue
            if e.kind == "prefill":
                top.plot(t, y[e.rid] + 0.12, marker="s", markersize=3.5, color="#08519c", linestyle="")
            elif e.kind == "token":
                top.plot(t, y[e.rid] - 0.12, marker="o", markersize=3, color="#238b45", linestyle="")
            elif e.kind == "finish":
                top.plot(t, y[e.rid], marker="|", markersize=12, color="black", linestyle="")
            elif e.kind == "load":
                top.plot(t, y[e.rid] + 0.12, marker="v", markersize=4, color="#e7298a", linestyle="")
            elif isinstance(e, Preempt) and str(e.by) in y:
                top.annotate("", xy=(t, y[e.rid]), xytext=(t, y[str(e.by)]),
                             arrowprops={"arrowstyle": "->", "color": "#cb181d", "lw": 1.2})
    for x, rid, kind in marked(run, steps):
        top.plot(x, y[rid], linestyle="", **MARKS[kind][1])
    bottom.bar(range(steps), run.held[:steps], width=1.0, color="#74c476", linewidth=0)
    bottom.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True, min_n_ticks=1))
    cfg = run.workload.config
    bottom.axhline(cfg.num_blocks, color="grey", linestyle="--", linewidth=0.8)
    bottom.set_ylim(0, cfg.num_blocks * 1.1 + 1)
    bottom.set_ylabel(f"KV blocks held\n(of {cfg.num_blocks})")
    bottom.set_xlabel("step")
    if run.marked_step is not None and run.marked_step < steps:
        for ax in axes:
            ax.axvline(run.marked_step, color="#cb181d", linestyle="--", linewidth=1)
    if run.cycle:
        start, length = run.cycle["start"], run.cycle["length"]
        for ax in axes:
            ax.axvspan(start - 0.5, min(steps, start + length) - 0.5, color="#cb181d", alpha=0.12, linewidth=0)
            ax.axvspan(start + length - 0.5, steps - 0.5, color="#cb181d", alpha=0.05, linewidth=0)
    paused = cfg.pause != "off" and cfg.pause_at < steps
    if paused:
        for ax in axes:
            ax.axvspan(cfg.pause_at - 0.5, min(steps, cfg.pause_end) - 0.5, color="grey", alpha=0.2, linewidth=0)
    top.set_yticks([y[r.rid] for r in requests],
                   [f"{r.rid} (p{r.priority})" if cfg.priority_preemption else r.rid for r in requests])
    top.set_ylim(-0.7, len(requests) - 0.3)
    if cfg.priority_preemption:
        top.set_ylabel("request (pN: priority,\nlower is more urgent)")
    top.set_xlim(-0.7, steps - 0.3)
    legend = [Patch(color=COLOURS[s], label=s) for s in (WAITING, RUNNING, PREEMPTED)]
    legend += [plt.Line2D([], [], marker="s", color="#08519c", linestyle="", label="prefill"),
               plt.Line2D([], [], marker="o", color="#238b45", linestyle="", label="token"),
               plt.Line2D([], [], marker="|", color="black", linestyle="", markersize=10, label="finish"),
               plt.Line2D([], [], marker="v", color="#e7298a", linestyle="", label="KV load starts"),
               plt.Line2D([], [], color="#cb181d", marker=">", label="preemption: requester -> victim")]
    legend += [plt.Line2D([], [], linestyle="", label=label, **MARKS[kind][1]) for kind, label in
               (("preempt", "preempted"), ("resume", "resumed"))]
    if run.marked_step is not None:
        legend.append(plt.Line2D([], [], color="#cb181d", linestyle="--", label="the violation's step"))
    if run.cycle:
        legend.append(Patch(color="#cb181d", alpha=0.25, label=f"cycle (period {run.cycle['length']})"))
    if paused:
        legend.append(Patch(color="grey", alpha=0.2, label=f"engine paused ({cfg.pause})"))
    legend += cached
    top.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    cut = f" (first {steps} of {len(run.events)} steps)" if steps < len(run.events) else ""
    top.set_title("\n".join(textwrap.wrap(f"{run.headline}{cut}", 90)), fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")   # (the legend hangs outside the axes)
    plt.close(fig)
