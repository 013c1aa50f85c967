"""tracekit.analyzers: pure functions from polars frames to polars frames. No printing here."""
