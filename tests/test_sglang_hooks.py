"""tracekit's SGLang hooks on real classes with SGLang's call shapes, under the CPU profiler.

The hook rows come from the real table (hooktable.specs_for(version)); only the
module/class prefix is pointed at tests/sglang_shapes.py. The v2 test applies
them through SGLang's own HookRegistry, loaded from the real 0.5.23 wheel.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")

import sglang_shapes as S  # noqa: E402
import sglang_wheels  # noqa: E402

from tracekit.collectors.hookspec import HookSpec  # noqa: E402
from tracekit.collectors.sglang import plugin, runtime  # noqa: E402
from tracekit.collectors.sglang.hooktable import specs_for  # noqa: E402
from tracekit.finalize.phases import parse_label  # noqa: E402

HERE = Path(__file__).parent
def fresh_shapes() -> ModuleType:
    """A private copy of sglang_shapes (patching it leaves other tests' classes alone)."""
    return S.fresh_copy()


def mapped(version: str, mod: ModuleType) -> list[HookSpec]:
    return S.retarget(specs_for(version), mod)


def labels(path: Path) -> list:
    return [lab for n in S.trace_names(str(path)) if (lab := parse_label(n)) is not None]


def test_v1_hooks_emit_phase_ranges_and_facts(tmp_path: Path) -> None:
    mod = fresh_shapes()
    rec = runtime.Recorder()
    rep = runtime.install_direct(specs=mapped("0.5.9", mod), rec=rec)
    # v1 (5 rows) + the opt-in v2 worker of 0.5.9 (5 rows) + ModelRunner.forward
    assert rep.skipped == [] and len(rep.installed) == len(specs_for("0.5.9")) == 11
    # idempotent: a second install wraps nothing twice
    runtime.install_direct(specs=mapped("0.5.9", mod), rec=rec)
    worker = mod.make_worker("0.5.9", tp_rank=3)
    out = tmp_path / "t.json"
    with S.cpu_profile(str(out)):
        mod.drive(worker, cycles=3)
    labs = labels(out)
    verify = [lab for lab in labs if lab.phase == "verify" and not lab.is_facts]
    assert [v.facts["cycle"] for v in verify] == [0, 1, 2]
    assert verify[0].facts == {"cycle": 0, "batch_size": 4, "num_tokens": 16, "seq_len": 32}
    # seq grows by accepted + bonus tokens (seq_lens_sum, a Python int)
    assert verify[1].facts["seq_len"] == (32 * 4 + sum(S.accepted(0, 4, 3)) + 4) // 4
    facts = [lab for lab in labs if lab.is_facts]
    assert [f.facts["cycle"] for f in facts] == [0, 1, 2]
    for f in facts:
        acc = S.accepted(int(f.facts["cycle"]), 4, 3)
        assert f.phase == "verify" and f.facts["graphed"] is True
        assert f.facts["accept_len"] == pytest.approx(sum(acc) / 4, abs=1e-4)
    drafts = [lab for lab in labs if lab.phase == "draft"]
    assert len(drafts) == 3 and all(d.facts["num_tokens"] == 12 for d in drafts)
    extends = [lab for lab in labs if lab.phase == "draft_extend"]
    assert len(extends) == 4  # prefill draft extend + one per cycle
    prefill = [lab for lab in labs if lab.phase == "prefill"]
    assert len(prefill) == 1 and prefill[0].facts["num_tokens"] == 128
    # the target's TARGET_VERIFY forward and the draft runner's DECODE steps are not decode phases
    assert not [lab for lab in labs if lab.phase == "decode"]
    assert rec.rank == 3 and rec.spec == {"steps": 3, "topk": 1, "draft_tokens": 4}


def _real_hook_registry(version: str) -> ModuleType:
    src = sglang_wheels.source(version) / "sglang" / "srt" / "plugins" / "hook_registry.py"
    spec = importlib.util.spec_from_file_location(f"sglang_hook_registry_{version.replace('.', '_')}", src)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # stdlib-only module: the real HookRegistry
    return mod


@pytest.mark.parametrize("version", ["0.5.12", "0.5.23"])
def test_v2_hooks_through_sglang_hook_registry(tmp_path: Path, version: str) -> None:
    reg = _real_hook_registry(version)
    reg.HookRegistry.reset()
    mod = fresh_shapes()
    rec = runtime.Recorder()
    done = plugin.register_with(reg.HookRegistry, reg.HookType.AROUND, mapped(version, mod), rec=rec)
    assert len(done) == len(specs_for(version))
    reg.HookRegistry.apply_hooks()
    assert mod.EAGLEWorkerV2.verify.__wrapped__ is not None  # wrapped by SGLang's _wrap_fn
    worker = mod.make_worker(version, tp_rank=1)
    out = tmp_path / "t.json.gz"
    with S.cpu_profile(str(out)):
        mod.drive(worker, cycles=4)
    labs = labels(out)
    verify = [lab for lab in labs if lab.phase == "verify" and not lab.is_facts]
    assert [v.facts["cycle"] for v in verify] == [0, 1, 2, 3]
    facts = [lab for lab in labs if lab.is_facts]
    graphed = {int(f.facts["cycle"]) for f in facts if "graphed" in f.facts}
    assert graphed == {0, 1, 2, 3}
    accepts = {int(f.facts["cycle"]): f.facts["accept_len"] for f in facts if "accept_len" in f.facts}
    # handed over one step late by on_verify_complete_cpu, matched to the right cycle
    assert accepts == {c: pytest.approx(sum(S.accepted(c, 4, 3)) / 4, abs=1e-4) for c in range(4)}
    assert worker.seen == [S.accepted(c, 4, 3) for c in range(4)]  # the original still ran
    names = S.trace_names(str(out))
    if version == "0.5.23":
        assert "draft" in names and "draft_extend" in names and "step[VERIFY bs=4]" in names
    else:
        assert "step[TARGET_VERIFY bs=4]" in names and "step[DECODE bs=4]" in names
    reg.HookRegistry.reset()


def test_plain_decode_only_on_target_runner(tmp_path: Path) -> None:
    mod = fresh_shapes()
    rec = runtime.Recorder()
    runtime.install_direct(specs=[s for s in mapped("0.5.23", mod) if s.role == "forward"], rec=rec)
    target = mod.ModelRunner(0, False, 2)
    draft = mod.ModelRunner(0, True, 1)
    out = tmp_path / "d.json"
    with S.cpu_profile(str(out)):
        for _ in range(3):
            target.forward(mod.ForwardBatch(mod.ForwardMode.DECODE, 16, 16 * 100))
            draft.forward(mod.ForwardBatch(mod.ForwardMode.DECODE, 16, 16 * 100))
        target.forward(mod.ForwardBatch(mod.ForwardMode.IDLE, 0, 0))
    labs = labels(out)
    dec = [lab for lab in labs if lab.phase == "decode" and not lab.is_facts]
    assert [d.facts for d in dec] == [{"cycle": c, "batch_size": 16, "num_tokens": 16, "seq_len": 100} for c in range(3)]
    graphed = [lab for lab in labs if lab.is_facts]
    assert [g.facts["graphed"] for g in graphed] == [False] * 3  # bs 16 > graph_max_bs 8


def test_missing_target_reported_once_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    mod = fresh_shapes()
    rows = [
        HookSpec(f"{mod.__name__}.EAGLEWorker.no_such_method", "verify", ("batch",)),
        HookSpec("tracekit_no_such_module_xyz.Worker.verify", "verify", ("batch",)),
        HookSpec(f"{mod.__name__}.EAGLEWorker.verify", "verify", ("batch",)),
    ]
    with caplog.at_level(logging.WARNING, logger="tracekit.sglang"):
        rep = runtime.install_direct(specs=rows, rec=runtime.Recorder())
        runtime.install_direct(specs=rows, rec=runtime.Recorder())
    assert rep.installed == [rows[2].target]
    assert rep.skipped == [rows[0].target, rows[1].target]
    msgs = [r.getMessage() for r in caplog.records]
    assert sum(rows[0].target in m for m in msgs) == 1 and sum(rows[1].target in m for m in msgs) == 1


def test_facts_never_read_device_data() -> None:
    """Batch facts come from ints, lists and CPU tensors; a device tensor is used for its shape only."""
    from tracekit.collectors.sglang import facts as F

    meta = torch.empty(5, device="meta")  # any data read from a meta tensor raises
    batch = S.ScheduleBatch(reqs=[], forward_mode=S.ForwardMode.DECODE, seq_lens=meta, seq_lens_cpu=meta, seq_lens_sum=None)  # type: ignore[arg-type]
    batch.reqs = None  # type: ignore[assignment]
    assert F.batch_size(batch) == 5
    assert F.mean_seq_len(batch) is None
    assert F.graphed_of((meta, True)) is True
    assert F.accepted_per_req(S.GenerationBatchResult(accept_lens=meta)) is None


def test_broken_batch_never_breaks_the_call(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """A batch whose fields raise: the SGLang call still runs and returns; the problem is logged once."""
    mod = fresh_shapes()

    class Hostile:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError(f"no {name}")

    class Worker:
        calls = 0

        def verify(self, batch: object) -> tuple[int, bool]:
            Worker.calls += 1
            return 7, True

    mod.Worker = Worker
    rows = [HookSpec(f"{mod.__name__}.Worker.verify", "verify", ("batch",)),
            HookSpec(f"{mod.__name__}.ModelRunner.forward", "forward", ("forward_batch",))]
    runtime.install_direct(specs=rows, rec=runtime.Recorder())
    with caplog.at_level(logging.WARNING, logger="tracekit.sglang"), S.cpu_profile(str(tmp_path / "t.json")):
        assert Worker().verify(Hostile()) == (7, True)
        assert Worker().verify(Hostile()) == (7, True)
        class BadFB(mod.ForwardBatch):  # type: ignore[name-defined,misc]
            def __getattribute__(self, name: str) -> object:
                if name == "seq_lens_sum":
                    raise RuntimeError("seq_lens_sum unreadable")
                return object.__getattribute__(self, name)

        out, graphed = mod.ModelRunner(0, False, 1).forward(BadFB(mod.ForwardMode.DECODE, 2, 0))
    assert Worker.calls == 2
    assert out.shape == (2, S.HIDDEN) and graphed is True
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("Worker.verify: facts skipped" in m for m in msgs) == 1
    assert sum("decode/prefill marking skipped" in m for m in msgs) == 1


def test_profiler_off_only_bookkeeping(tmp_path: Path) -> None:
    """Between windows the hooks record nothing but keep cycle numbers and the v2 accept queue exact."""
    mod = fresh_shapes()
    rec = runtime.Recorder()
    runtime.install_direct(specs=mapped("0.5.23", mod), rec=rec)
    worker = mod.make_worker("0.5.23", tp_rank=0)
    mod.drive(worker, cycles=5)  # no profiler: cycles 0-4
    assert rec.cycle == 4 and len(rec.pending_accept) == 0
    out = tmp_path / "t.json"
    with S.cpu_profile(str(out)):
        mod.drive(worker, cycles=2)
    labs = labels(out)
    assert [lab.facts["cycle"] for lab in labs if lab.phase == "verify" and not lab.is_facts] == [5, 6]
    accepts = {int(f.facts["cycle"]): f.facts["accept_len"] for f in labs if f.is_facts and "accept_len" in f.facts}
    assert accepts == {c: pytest.approx(sum(S.accepted(c, 4, 3)) / 4, abs=1e-4) for c in (5, 6)}
