"""Engine logs and metrics as runs (``tracekit logs``; docs/logs.md).

- :mod:`tracekit.logs.grammars`: every built-in line grammar as data (SGLang scheduler lines,
  vLLM V0/V1 stat lines, cudagraph warnings, start-up lines), each with its source file and
  version family.
- :mod:`tracekit.logs.prefix`: the engines' logging prefixes (time, DP/TP/EP/PP, pid, engine).
- :mod:`tracekit.logs.patterns`: user patterns (``'Target verify: {verify_ms:f} ms/cyc'``).
- :mod:`tracekit.logs.prometheus`: ``/metrics`` text snapshots; two snapshots are one interval.
- :mod:`tracekit.logs.accept`: the one definition of accept length / accept rate.
- :mod:`tracekit.logs.parse`: the streaming reader (bounded memory, one row per matched line).
- :mod:`tracekit.logs.run`: the log run (Parquet + manifest): write, read, recognise.

Nothing here imports torch, sglang or vllm.
"""
