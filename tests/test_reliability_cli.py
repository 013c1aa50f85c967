"""Issue 12, the rows that need no capture: an input is never destroyed, every output follows one
rule, partial runs say so (exit 3), bad names are one line, tables survive a pipe at 80 columns."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from kineto_synth import gpu_rank

from tracekit.cli import cli
from tracekit.outputs import OutputLock, sidecar, temp_beside
from tracekit.store import load_run, read_manifest, write_run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CPU8 = SAMPLES / "cpu8-builtin" / "run.parquet"
H200 = SAMPLES / "h200x2-forensics" / "run.parquet"


def _run(args: list[str], columns: int = 80) -> tuple[int, str, str]:
    """Exit code, stdout, stderr (less the note that a run is of an older finalize version)."""
    res = CliRunner(env={"COLUMNS": str(columns)}).invoke(cli, args)
    err = "".join(ln for ln in res.stderr.splitlines(keepends=True) if "`tracekit upgrade" not in ln)
    return res.exit_code, res.stdout, err


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _leftovers(d: Path) -> list[str]:
    """Temp files and lock files a command may have left beside its output."""
    return sorted(p.name for p in d.iterdir() if p.name.endswith((".tmp", ".lock")))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return gpu_rank(0).write(tmp_path / "r0.json.gz"), gpu_rank(1).write(tmp_path / "r1.json.gz")


def test_ingest_onto_its_input_is_refused_before_reading(pair: tuple[Path, Path]) -> None:
    r0, r1 = pair
    before = _digest(r0)
    code, out, err = _run(["ingest", str(r0), str(r1), "-o", str(r0)])
    assert code == 2 and out == "", err
    assert err == (f"tracekit: error: {r0}: the output is an input: writing it would destroy {r0} (nothing was read "
                   "or written; choose another output)\n")
    assert _digest(r0) == before and _leftovers(r0.parent) == []
    # a glob naming the output is caught too
    code, _, err = _run(["ingest", str(r0.parent / "r*.json.gz"), "-o", str(r1)])
    assert code == 2 and "the output is an input" in err


def test_export_onto_its_run_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run.parquet"
    run.write_bytes(H200.read_bytes())
    before = _digest(run)
    code, _, err = _run(["export", str(run), "-o", str(run), "--format", "perfetto"])
    assert code == 2
    assert err == (f"tracekit: error: {run}: the output is an input: writing it would destroy {run} (nothing was read "
                   "or written; choose another output)\n")
    assert _digest(run) == before and _leftovers(tmp_path) == []
    code, _, err = _run(["align", str(run), "-o", str(run)])
    assert code == 2 and _digest(run) == before


def test_output_name_of_245_characters_is_written(pair: tuple[Path, Path]) -> None:
    r0, r1 = pair
    out = r0.parent / ("r" * 237 + ".parquet")  # 245 bytes: legal, but ".NAME.xxxxxxxx.tmp" would not be
    code, _, err = _run(["ingest", str(r0), str(r1), "-o", str(out)])
    assert code == 0, err
    assert load_run(out).ranks == [0, 1]
    assert _leftovers(r0.parent) == []
    tmp = temp_beside(out)  # the names the writers use fit too
    assert len(Path(tmp).name) <= 255
    os.unlink(tmp)
    lock = sidecar(out, ".lock")
    assert len(lock.name) <= 255 and lock.name.endswith(".lock") and lock == sidecar(out, ".lock")


@pytest.mark.parametrize("which", ["input", "output"])
def test_name_of_300_characters_is_one_line(pair: tuple[Path, Path], which: str) -> None:
    r0, r1 = pair
    long = r0.parent / ("x" * 292 + ".parquet")
    args = ["info", str(long)] if which == "input" else ["ingest", str(r0), str(r1), "-o", str(long)]
    code, out, err = _run(args)
    assert code == 1 and out == ""
    assert err == f"tracekit: error: {long}: file name too long (300 bytes in one name; this file system allows 255)\n"
    assert _leftovers(r0.parent) == []


def test_missing_parent_directory_is_refused_by_every_writer(pair: tuple[Path, Path], tmp_path: Path) -> None:
    r0, r1 = pair
    run = tmp_path / "run.parquet"
    write_run(load_run(H200).events, run, read_manifest(H200))
    shards = tmp_path / "shards"
    _split_into_shards(H200, shards, [0, 1])
    typo = tmp_path / "oops" / "deeper"
    for args, name in ((["ingest", str(r0), str(r1)], "run.parquet"), (["export", str(run)], "run.pftrace"),
                       (["align", str(run)], "run.parquet"), (["merge", str(shards)], "run.parquet")):
        out = typo / name
        code, _, err = _run([*args, "-o", str(out)])
        assert code == 1, (args, err)
        assert err == (f"tracekit: error: {out}: directory {typo} does not exist (tracekit creates no missing "
                       f"directories: mkdir -p {typo} first if it is the one you meant)\n")
        assert not (tmp_path / "oops").exists()


def test_a_live_lock_refuses_a_second_writer_and_a_stale_one_is_replaced(pair: tuple[Path, Path]) -> None:
    r0, r1 = pair
    out = r0.parent / "run.parquet"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stat = Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[-1].split()[19]
        lock = sidecar(out, ".lock")
        import socket

        lock.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(), "start": stat}))
        code, _, err = _run(["ingest", str(r0), str(r1), "-o", str(out)])
        assert code == 1 and not out.exists()
        assert err == (f"tracekit: error: {out}: another tracekit (pid {holder.pid}) is writing this output "
                       f"(lock file {lock}; remove it only if that process is gone)\n")
    finally:
        holder.kill()
        holder.wait()
    code, _, err = _run(["ingest", str(r0), str(r1), "-o", str(out)])  # its process is gone: stale
    assert code == 0, err
    assert f"tracekit: note: replaced a stale lock {lock} (pid {holder.pid} no longer runs)" in err
    assert not lock.exists() and load_run(out).ranks == [0, 1]
    with OutputLock(out) as held:  # the lock is this process's while held, gone after
        assert held.path.exists()
    assert not lock.exists()


def test_on_error_skip_names_the_skipped_file_first(pair: tuple[Path, Path]) -> None:
    r0, r1 = pair
    r1.write_bytes(r1.read_bytes()[:200])  # a corrupt rank file
    out = r0.parent / "run.parquet"
    code, _, err = _run(["ingest", str(r0), str(r1), "--on-error", "skip", "-o", str(out)])
    assert code == 1 and not out.exists()
    assert err.startswith(f"tracekit: error: {r1}: skipped: truncated or corrupt gzip (")
    assert err.endswith("; so missing rank(s) 1 of world size 2 (use --allow-missing-ranks to ingest anyway)\n")
    assert err.count("\n") == 1
    code, _, err = _run(["ingest", str(r0), str(r1), "--on-error", "skip", "--allow-missing-ranks", "-o", str(out)])
    assert code == 3  # a partial run is written
    assert err.index(str(r1)) < err.index("missing rank 1")


def test_integer_microsecond_traces_warn_at_ingest_and_in_info(tmp_path: Path) -> None:
    paths = []
    for r in (0, 1):
        b = gpu_rank(r, integer_us=True)
        b.kernel("tiny_kernel", 5_150_227_743_900_000, 5_150_227_743_901_000, 0)  # a 0.4 us kernel, written as 0 us
        paths.append(str(b.write(tmp_path / f"u{r}.json")))
    out = tmp_path / "run.parquet"
    code, _, err = _run(["ingest", *paths, "-o", str(out)])
    assert code == 0, err
    warn = (f"tracekit: warning: {out}: ranks 0, 1: time stamps have 1 us resolution (whole microseconds in the "
            "trace): 2 of 20 kernels are 0 ns long; kernel times are exact only to 1 us\n")
    assert err.endswith(warn)
    assert read_manifest(out)["ranks"]["0"]["time_resolution_ns"] == 1000
    code, _, err = _run(["info", str(out)])
    assert code == 0 and err == warn
    code, _, err = _run(["info", str(CPU8)])  # ns time stamps: no warning
    assert code == 0 and err == ""


def _split_into_shards(src: Path, d: Path, keep: list[int]) -> None:
    run = load_run(src)
    d.mkdir()
    for r in keep:
        man = dict(run.manifest)
        man["ranks"] = {str(r): run.manifest["ranks"][str(r)]}
        write_run(run.events.filter(pl.col("rank") == r), d / f"rank-{r:05d}.parquet", man)


def test_merge_a_shard_directory_and_every_reader_accepts_it(tmp_path: Path) -> None:
    d = tmp_path / "run.parquet.d"
    _split_into_shards(CPU8, d, [0, 1, 2, 3, 4, 5, 7])  # rank 6 left no shard
    (d / "rank-00006.log").write_text("killed\n")
    out = tmp_path / "run.parquet"
    code, stdout, err = _run(["merge", str(d), "-o", str(out)])
    assert code == 3
    assert stdout == f"merged 7 shard(s) from {d} into {out} (the shards are left in {d})\n"
    assert err == (f"tracekit: warning: {out}: partial run: rank 6 missing (rank 6: no shard rank-00006.parquet in "
                   f"{d} (its log: {d / 'rank-00006.log'}))\n")
    assert load_run(out).ranks == [0, 1, 2, 3, 4, 5, 7] and len(list(d.glob("rank-*.parquet"))) == 7
    # every command that reads a run takes the directory as it is, and says the run is partial
    for args in (["attribute", str(d)], ["info", str(d)], ["ranks", str(d)], ["gap", str(d)]):
        code, _, err = _run(args)
        assert code == 0, (args, err)
    code, _, err = _run(["attribute", str(out)])
    assert code == 0 and "tracekit: warning: " + str(out) + ": partial run: rank 6 missing" in err
    # ingest of a shard directory points at merge
    code, _, err = _run(["ingest", str(d), "-o", str(tmp_path / "x.parquet")])
    assert code == 1
    assert err == (f"tracekit: error: {d}: is a capture's shard directory (rank-*.parquet), not traces: merge it with "
                   f"`tracekit merge {d} -o run.parquet`, or pass it to any command that reads a run\n")
    code, _, err = _run(["merge", str(d), "-o", str(d / "rank-00000.parquet")])
    assert code == 2 and "the output is inside the input directory" in err


@pytest.mark.parametrize(("cmd", "src"), [("info", H200), ("spec", H200), ("ranks", H200), ("diff", None)])
def test_tables_are_not_cut_when_piped_at_80_columns(cmd: str, src: Path | None) -> None:
    eager, graphed = SAMPLES / "h200x2-builtin" / "eager.parquet", SAMPLES / "h200x2-builtin" / "graphed.parquet"
    args = [cmd, str(eager), str(graphed)] if src is None else [cmd, str(src)]
    code, out, err = _run(args, columns=80)
    assert code == 0, err
    assert "…" not in out  # rich's cut cell marker (kernel names shortened on purpose end in "...")
    # every column header is whole: the headers of the JSON document's tables appear as they are
    if cmd == "info":
        for word in ("attention", "allreduce", "elementwise"):
            assert word in out
    if cmd == "spec":
        assert "tok/cycle" in out or "tok/s" in out


def test_full_disk_is_one_line_and_the_old_output_survives(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(small)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        old = small / "run.pftrace"
        old.write_text("old")
        (small / "fill").write_bytes(b"\0" * 188 * 1024)  # about 12 KiB left
        code, _, err = _run(["export", str(H200), "-o", str(old)])
        assert code == 1
        assert err == (f"tracekit: error: {old}: no space left on device (the partial file was removed; an existing "
                       "output is untouched)\n")
        code, _, err = _run(["ingest", *map(str, pair), "-o", str(small / "run.parquet")])
        assert code == 1 and err.endswith(": no space left on device (the partial file was removed; an existing "
                                          "output is untouched)\n")
        assert old.read_text() == "old" and sorted(p.name for p in small.iterdir()) == ["fill", "run.pftrace"]
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_terminal_progress_lists_every_rank_s_cycles() -> None:
    from tracekit.collectors.launcher import Failure, explain
    from tracekit.collectors.progress import Progress

    said: list[str] = []
    prog = Progress(said.append, world=8, total_cycles=12, live=True)
    for r in range(8):
        prog.stage(r, "pg", "process group up")
        prog.cycle(r, 8 if r < 7 else 7)
    assert len(said) == 1 and said[0].startswith("capture: process group up (8/8 ranks, ")
    prog._last_tick -= 10
    prog.tick()
    assert said[1].endswith("cycles done: ranks 0-6 9/12, rank 7 8/12")
    lines = explain({0: Failure(0, 2.0, "failed: RuntimeError: reset", collective=True, stage="s"),
                     3: Failure(3, 1.0, "killed by SIGKILL", stage="s")})
    assert [ln for _, ln in lines] == ["rank 3: killed by SIGKILL s (root cause)",
                                       "rank 0: lost its peer (rank 3) s: failed: RuntimeError: reset"]
