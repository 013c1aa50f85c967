"""Summary printed at the end of ``tracekit capture``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.manifest import typed
from tracekit.ranklist import ranks_by_reason
from tracekit.render.units import ms

if TYPE_CHECKING:
    from tracekit.collectors.capture import CaptureResult



def reference_note(before_ns: float | None, after_ns: float | None, window_ns: float | None = None) -> str:
    """How a dilation's reference was timed: both blocks' medians (and the ratio against each, the ratio's
    spread), or that only the warm-up timed it."""
    if before_ns is None or after_ns is None:
        return "reference timed before the window only"
    text = f"reference {ms(before_ns)} before / {ms(after_ns)} after the window"
    if window_ns and before_ns > 0 and after_ns > 0:
        lo, hi = sorted((window_ns / before_ns, window_ns / after_ns))
        text += f": x{lo:.2f}-x{hi:.2f} against either"
    return text


def dilation_lines(manifest: dict[str, Any]) -> list[str]:
    """One line per phase: unprofiled vs profiled median per phase instance (median over ranks), the ratio, and the
    spread of its reference (the unprofiled blocks before and after the window)."""
    from tracekit.analyzers.unprofiled import phase_timers

    timers = {ph: t for ph, t in phase_timers(manifest).items()
              if t.window_ns is not None and t.paired_unprofiled_ns is not None}
    lines = []
    from tracekit.render.attribute import phase_order

    for ph in phase_order(timers):
        t = timers[ph]
        ratio = "n/a" if t.ratio is None else f"x{t.ratio:.2f}"
        lines.append(f"  {ph:<13} {ms(t.paired_unprofiled_ns)} unprofiled, {ms(t.window_ns)} in the window "
                     f"({ratio}; {reference_note(t.before_ns, t.after_ns, t.window_ns)}; {t.clock}, median over {t.ranks} rank(s))")
    return lines


def profile_line(manifest: dict[str, Any] | None) -> str | None:
    """'profile mode lite: <what it records and cannot give>' from a capture manifest, else None."""
    if not manifest:
        return None
    man = typed(manifest)
    mode = man.capture.get("profile_mode")
    if not mode:
        return None
    notes = sorted({sec.profile_note for sec in man.ranks.values() if sec.profile_note})
    return f"profile mode {mode}: " + (" / ".join(notes) if notes else "(no rank recorded a note)")


def render_capture_summary(result: CaptureResult) -> str:
    if result.merged_by is not None:  # a node of a multi-host capture that does not merge
        from tracekit.ranklist import format_rank_list

        lines = [f"wrote the shards of ranks {format_rank_list(result.local_ranks)} ({result.size_bytes / 1e6:.2f} MB, "
                 f"{result.events} events) beside {result.out}; node {result.merged_by} merges them into {result.out}"]
        lines += [f"  missing rank {r}: {why}" for r, why in sorted(result.missing.items(), key=lambda kv: int(kv[0]))]
        return "\n".join(lines)
    man = typed(result.manifest)
    cap = man.capture
    windows = [(sec.window or {}).get("cycles", 0) for sec in man.ranks.values()]
    lines = [
        f"wrote {result.out} ({result.size_bytes / 1e6:.2f} MB, {result.events} events)",
        f"ranks: {len(man.ranks)} of {len(result.captured)} captured (world {result.world}); "
        f"cycles per rank: {min(windows) if windows else 0}..{max(windows) if windows else 0} "
        f"of {cap.get('cycles')} (after {cap.get('warmup')} warm-up)",
    ]
    intr = man.interrupted
    if intr is not None:
        lines[0] += f" (interrupted: {intr.get('cycles_done')} of {intr.get('cycles_requested')} cycles)"
        lines.append("interrupted: Ctrl-C ended the window early; the run holds the cycles captured on every rank")
    for rs, why in ranks_by_reason(result.missing):
        lines.append(f"  missing {rs}: {why}")
    for rank in man.rank_ids():
        if ended := man.ranks[str(rank)].aborted:
            lines.append(f"  rank {rank} window ended early: {ended}")
    mode = cap.get("profile_mode")
    pl_line = profile_line(result.manifest)
    if pl_line:
        lines.append(pl_line)
    dl = dilation_lines(result.manifest)
    if dl:
        word = "timing-mode cost" if mode == "timing" else "profiler dilation"
        lines.append(f"{word} per phase (median time per phase instance, {'timed' if mode == 'timing' else 'profiled'} "
                     "vs unprofiled cycles of the same process):")
        lines.extend(dl)
    lines.append(f"next: tracekit attribute {result.out}")
    return "\n".join(lines)
