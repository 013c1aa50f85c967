"""Ingest foreign traces (Kineto / torch.profiler JSON, SGLang profiles) into the event table."""
