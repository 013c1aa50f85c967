"""vLLM as a capture engine (``tracekit capture --engine vllm``; docs/vllm.md).

hooktable (data: the hook points per version), contract (their static check against a
source tree), runtime (the hooks inside vLLM's worker processes), plugin (the
``vllm.general_plugins`` entry point that installs them), worker (the worker extension the
capture drives through ``collective_rpc``), presets (random-weight model configs), config and
commands (what travels to the driver, the CLI glue), driver (the process that runs vLLM's
offline engine). vllm is imported in runtime/worker/driver only, inside vLLM's processes.
"""
