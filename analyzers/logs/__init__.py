"""Analyses of log runs (``tracekit logs``): pure functions over the rows of a log run, returning
frozen reports; the words are in ``tracekit/render/log_*.py``.

- :mod:`.views`: interval rows with their operating point (batch, tokens per request, graph use)
  and the user-pattern rows with the operating point of the line before them.
- :mod:`.stats`: one summary per series (n, mean, median, p90; nearest-rank quantiles of
  ``analyzers/robust.py``).
- :mod:`.info`, :mod:`.spec`, :mod:`.diff`: ``info``, ``spec`` and ``diff`` on log runs.
"""
