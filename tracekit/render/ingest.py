"""What `tracekit ingest` and `tracekit align` print: progress bar, summary, clock alignment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.manifest import typed
from tracekit.ranklist import format_rank_list, ranks_by_reason

if TYPE_CHECKING:
    from rich.console import Console

PROGRESS_MIN_BYTES = 32 << 20  # show a progress bar from this much input on


class ByteProgress:
    """A transient rich progress bar over input bytes, shown only for large inputs."""

    def __init__(self, console: Console, *, min_bytes: int = PROGRESS_MIN_BYTES) -> None:
        self.console, self.min_bytes = console, min_bytes
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int, current: str) -> None:
        if total < self.min_bytes:
            return
        if self._bar is None:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TransferSpeedColumn,
            )

            self._bar = Progress(TextColumn("ingest"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                 TextColumn("{task.fields[file]}"), console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("ingest", total=total, file="")
        self._bar.update(self._task, completed=done, file=current.rsplit("/", 1)[-1][:40])

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def alignment_line(clock: dict[str, Any]) -> str | None:
    """One line on a fitted clock alignment, or None when the run was not aligned on collectives."""
    if clock.get("align") != "collectives":
        return None
    from tracekit.analyzers.rank_summary import summarize
    from tracekit.render.rank_fold import FOLD_ABOVE

    pairs = sorted(((int(r), int(v)) for r, v in clock.get("offsets_ns", {}).items()), key=lambda kv: kv[0])
    offs = ", ".join(f"rank {r} {v:+,} ns" for r, v in pairs)
    s = summarize(pairs, "offset_ns", "ns")
    if s is not None and len(pairs) > FOLD_ABOVE:  # many ranks: the offsets' summary (every one: the manifest's clock)
        offs = (f"{len(set(v for _, v in pairs))} distinct offsets over {s.count} ranks, median {int(s.median):+,} ns, "
                f"min {int(s.min.value):+,} ns (rank {s.min.rank}), max {int(s.max.value):+,} ns (rank {s.max.rank}) "
                "(every rank's: the run manifest's clock.offsets_ns)")
    res = clock.get("residual_ns", {})
    return (f"clocks aligned on {clock.get('collectives', 0)} collective ends ({clock.get('rejected', 0)} rejected; "
            f"offset added per rank, raw = start_ns - offset): {offs}; "
            f"residual median {res.get('median', '?')} ns, max {res.get('max', '?')} ns")


def print_ingest_summary(err: Console, out: object, height: int, man: dict[str, Any], seconds: float) -> None:
    """The lines after a successful ingest: what was written, alignment, missing ranks, notes, skipped files."""
    m = typed(man)
    size = sum(int(s.get("size", 0)) for s in m.sources)
    err.print(f"wrote {out}: {height:,} events, ranks {format_rank_list(m.rank_ids())} of world size "
              f"{m.world_size}, from {len(m.sources)} file(s) ({size / 1e6:,.1f} MB) "
              f"in {seconds:.2f} s")
    line = alignment_line(m.clock)
    if line:
        err.print(line)
    skipped = m.ingest.get("skipped", [])
    if skipped:  # first: a skipped file is usually why a rank is missing
        err.print(f"skipped {len(skipped)} file(s):", style="yellow")
        for s in skipped:
            err.print(f"  {s['path']}: {s['reason']}", style="yellow", highlight=False)
    for rs, why in ranks_by_reason(m.missing_ranks):
        err.print(f"missing {rs}: {why}", style="yellow", highlight=False)
    for note in m.ingest.get("notes", []):
        err.print(note, style="yellow")


__all__ = ["PROGRESS_MIN_BYTES", "ByteProgress", "alignment_line", "print_ingest_summary"]

