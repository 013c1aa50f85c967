"""The speed-of-light model (``tracekit sol``; docs/sol.md): what a phase should cost on a GPU.

- ``config``: a Hugging Face config.json -> ``ModelShape`` (weights, sharding rule, bytes per parameter);
- ``quant``: bytes per parameter per module from the quantization block;
- ``gpus``: the GPU table (tracekit/data/gpus.toml) and spec files;
- ``model``: bytes and FLOPs per GPU for one forward under a parallel layout;
- ``allreduce``: the ring model and its fit to a run's own collectives;
- ``floor``: the floor per phase and bucket;
- ``run``: floors beside a run's measured phases (% of SOL).
"""
