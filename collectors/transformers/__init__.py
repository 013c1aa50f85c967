"""Hugging Face transformers' speculative decoding (assisted generation) as a capture engine.

``tracekit capture --engine transformers``: hooktable (data: the hook points per
version), contract (their static check against a source tree), presets (random
weight models, the ``--assistant`` grammar), config (what travels to the ranks),
engine (one rank: load, tensor parallel, generate), runtime (the hooks),
commands (CLI glue). transformers is imported in engine/runtime/presets' builders
only, inside the rank processes. See docs/transformers.md.
"""
