"""The log-run paths of ``info``, ``spec`` and ``diff`` (a log run or an engine log file where a run
is expected) and the user-pattern options they share with ``tracekit logs``. Imported by the
command modules at load: nothing heavy here at import time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from tracekit.cli.common import INPUT_FILE
from tracekit.render.text import echo


def user_patterns(patterns: tuple[str, ...], pattern_file: str | None) -> list[object]:
    """The compiled ``--pattern`` / ``--patterns FILE`` (a bad one: exit 2, one line)."""
    from tracekit.logs.patterns import compile_patterns, read_pattern_file
    from tracekit.logs.run import reserved_columns

    texts = [*patterns, *(read_pattern_file(pattern_file) if pattern_file else [])]
    return list(compile_patterns(texts, reserved_columns()))


# --- the log-run paths of info / spec / diff / report --------------------------------------------

def run_logs(files: tuple[str, ...] | list[str], output: str, patterns: tuple[str, ...], pattern_file: str | None, *,
             engine_version: str | None = None, as_json: bool = False, quiet: bool = False) -> None:
    """``tracekit logs`` (and ``tracekit ingest`` given log files): parse, write, summarize."""
    from tracekit.cli.common import _claim
    from tracekit.logs.parse import parse_logs
    from tracekit.render.logs import summary_lines, to_json

    pats: Any = user_patterns(patterns, pattern_file)
    progress: Any = None
    if not quiet and not as_json:
        from tracekit.render.console import SafeConsole as Console
        from tracekit.render.ingest import ByteProgress

        progress = ByteProgress(Console(stderr=True, soft_wrap=True))
    with _claim(output, list(files)):
        try:
            res = parse_logs(files, output, pats, engine_version=engine_version, progress=progress)
        finally:
            if progress is not None:
                progress.stop()
    if as_json:
        _emit(to_json(res.manifest, res.rows, str(res.path)))
    elif not quiet:
        for line in summary_lines(res.manifest, res.rows, str(res.path)):
            echo(line, err=True)


def log_options(fn: Any) -> Any:
    """``--pattern`` / ``--patterns``: for a log file given where a run is expected (read on the fly)."""
    fn = click.option("--patterns", "pattern_file", type=INPUT_FILE,
                      help="Log files: a file of user patterns, one a line.")(fn)
    return click.option("--pattern", "patterns", multiple=True,
                        help="Log files: a user pattern, e.g. 'Target verify: {verify_ms:f} ms/cyc' (repeatable).")(fn)


TRACE_SUFFIXES = (".json", ".json.gz", ".gz", ".pftrace", ".parquet")
LOG_SUFFIXES = (".log", ".prom", ".txt", ".out", ".err")


def is_log_input(path: str) -> bool:
    """A log run (``tracekit logs`` output) or a text file that is neither Parquet nor a JSON trace."""
    from pathlib import Path

    from tracekit.logs.run import head_bytes, read_log_manifest

    p = Path(path)
    head = head_bytes(p, 256)
    if head is None:
        return False
    if head.startswith(b"PAR1"):
        return read_log_manifest(p) is not None
    if p.name.endswith(TRACE_SUFFIXES):
        return False  # a run or trace by its name, whatever its bytes: its own reader says what is wrong
    text = head.lstrip()
    if text.startswith(b"[") and text[1:].lstrip()[:1] in (b"{", b"]"):
        return False  # a JSON array (a Chrome trace); SGLang lines start with "[2025-..."
    return not text.startswith((b"{", b"\x1f\x8b"))


def looks_like_log(path: str) -> bool:
    """For ``tracekit ingest``, which reads traces: a file that is an engine log or metrics snapshot —
    no trace suffix, and a log suffix or an engine line / Prometheus text in its first 64 KiB."""
    from pathlib import Path

    from tracekit.logs.grammars import GRAMMARS, STARTUP
    from tracekit.logs.prometheus import looks_like_metrics
    from tracekit.logs.run import head_bytes

    p = Path(path)
    if not p.is_file() or p.name.endswith(TRACE_SUFFIXES) or not is_log_input(path):
        return False
    if p.name.endswith(LOG_SUFFIXES):
        return True
    head = head_bytes(p, 1 << 16) or b""
    text = head.decode("utf-8", errors="replace")
    return looks_like_metrics(head) or any(k in text for k in (*(g.keyword for g in GRAMMARS),
                                                                  *(s.keyword for s in STARTUP)))


@dataclass(frozen=True)
class LoadedLog:
    rows: Any  # polars DataFrame
    manifest: dict[str, Any]
    path: str


def load_log(path: str, patterns: tuple[str, ...] = (), pattern_file: str | None = None) -> LoadedLog:
    """A log run as it is, or a log file parsed into a temporary log run first."""
    import shutil
    import tempfile
    from pathlib import Path

    from tracekit.logs.parse import parse_logs
    from tracekit.logs.run import read_log_manifest, read_log_rows

    man = read_log_manifest(path)
    if man is not None:
        if patterns or pattern_file:
            raise click.UsageError(f"{path} is a log run: its patterns were fixed by `tracekit logs` "
                                   "(--pattern applies to log files)")
        return LoadedLog(read_log_rows(path), man, path)
    pats: Any = user_patterns(patterns, pattern_file)
    tmp = Path(tempfile.mkdtemp(prefix="tracekit-logs-"))
    try:
        res = parse_logs([path], tmp / "run.parquet", pats)
        return LoadedLog(read_log_rows(res.path), res.manifest, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def log_info_cmd(path: str, patterns: tuple[str, ...], pattern_file: str | None, as_json: bool) -> None:
    from tracekit.analyzers.logs.info import log_info
    from tracekit.render.log_analyses import info_json, info_lines

    lg = load_log(path, patterns, pattern_file)
    rep = log_info(lg.rows, lg.manifest, path)
    _emit(info_json(rep) if as_json else info_lines(rep))


def log_spec_cmd(path: str, patterns: tuple[str, ...], pattern_file: str | None, as_json: bool, *, stat: str,
                 verify_field: str | None, draft_field: str | None, decode_field: str | None,
                 baseline_tps: float | None, target_tps: float | None) -> None:
    from tracekit.analyzers.logs.spec import log_spec
    from tracekit.errors import AnalysisError
    from tracekit.render.log_analyses import spec_json, spec_lines

    lg = load_log(path, patterns, pattern_file)
    try:
        rep = log_spec(lg.rows, lg.manifest, path, stat=stat, verify_field=verify_field, draft_field=draft_field,
                       decode_field=decode_field, baseline_tps=baseline_tps, target_tps=target_tps)
    except AnalysisError as exc:
        raise exc.located(path=path) from None
    _emit(spec_json(rep) if as_json else spec_lines(rep))


def log_gap_cmd(run: str, a: str, b: str, b_run: str | None, patterns: tuple[str, ...], pattern_file: str | None,
                as_json: bool, *, stat: str) -> None:
    from tracekit.analyzers.logs.gap import log_gap
    from tracekit.errors import AnalysisError, side_path
    from tracekit.render.log_analyses import gap_json, gap_lines

    la = load_log(run, patterns, pattern_file)
    lb = load_log(b_run, patterns, pattern_file) if b_run is not None else la
    try:
        rep = log_gap(la.rows, la.manifest, la.path, a, lb.rows, lb.manifest, lb.path, b, stat=stat)
    except AnalysisError as exc:
        raise exc.located(path=side_path(exc, run, b_run)) from None
    _emit(gap_json(rep) if as_json else gap_lines(rep))


def log_diff_cmd(old: str, new: str, patterns: tuple[str, ...], pattern_file: str | None, as_json: bool, *,
                 stat: str, tokens_width: int | None) -> None:
    from tracekit.analyzers.logs.diff import log_diff
    from tracekit.render.log_analyses import diff_json, diff_lines

    a = load_log(old, patterns, pattern_file)
    b = load_log(new, patterns, pattern_file)
    rep = log_diff(a.rows, a.manifest, b.rows, b.manifest, old, new, stat=stat, tokens_width=tokens_width)
    _emit(diff_json(rep) if as_json else diff_lines(rep))


def log_trace_diff_cmd(old: str, new: str, log_is_old: bool, patterns: tuple[str, ...], pattern_file: str | None,
                       as_json: bool, *, stat: str, tokens_width: int | None) -> None:
    from tracekit.analyzers.logs.trace_diff import log_vs_trace
    from tracekit.cli.common import _load
    from tracekit.errors import AnalysisError
    from tracekit.render.log_analyses import trace_diff_json, trace_diff_lines

    log_path, run_path = (old, new) if log_is_old else (new, old)
    lg = load_log(log_path, patterns, pattern_file)
    run = _load(run_path)
    try:
        rep = log_vs_trace(lg.rows, lg.manifest, log_path, run.events, run_path, log_is_old=log_is_old, stat=stat,
                           tokens_width=tokens_width)
    except AnalysisError as exc:
        raise exc.located(path=run_path) from None
    _emit(trace_diff_json(rep) if as_json else trace_diff_lines(rep))


def _emit(out: Any) -> None:
    if isinstance(out, dict):
        import json

        echo(json.dumps(out, indent=2, default=str, allow_nan=False))
    else:
        for line in out:
            echo(line)


def log_report_cmd(run: str, b_run: str | None, output: str, png_dir: str | None, patterns: tuple[str, ...],
                   pattern_file: str | None) -> Any:
    """``tracekit report`` of one or two logs: the ReportResult."""
    from tracekit.analyzers.logs.curve import log_curve
    from tracekit.analyzers.logs.diff import log_diff, tokens_bin_width
    from tracekit.analyzers.logs.info import log_info
    from tracekit.render.log_analyses import diff_json, diff_lines, info_json, info_lines
    from tracekit.render.report.logs import build_log_report

    sides = [("A", load_log(run, patterns, pattern_file))]
    if b_run is not None:
        sides.append(("B", load_log(b_run, patterns, pattern_file)))
    width = tokens_bin_width(*(lg.rows for _t, lg in sides))
    curves = [(tag, log_curve(lg.rows, lg.path, width)) for tag, lg in sides]
    infos = [(tag, log_info(lg.rows, lg.manifest, lg.path)) for tag, lg in sides]
    docs: dict[str, Any] = {tag: {"info": info_json(rep)} for tag, rep in infos}
    dl = None
    if b_run is not None:
        (_, a), (_, b) = sides
        rep = log_diff(a.rows, a.manifest, b.rows, b.manifest, a.path, b.path, tokens_width=width)
        dl = diff_lines(rep)
        docs["diff"] = diff_json(rep)
    return build_log_report(output, curves, [(f"{tag}: {rep.path}", info_lines(rep)) for tag, rep in infos], dl, docs,
                            png_dir)
