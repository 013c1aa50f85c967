"""Words for ``tracekit logs``: what each file gave (rows per grammar and version, unmatched lines
with the first few shown, half matches naming the field that broke, unknown fields)."""

from __future__ import annotations

from typing import Any

from tracekit.documents import LOGS


def summary_lines(manifest: dict[str, Any], rows: int, out: str) -> list[str]:
    lines = [f"{out}: {rows:,} rows from {len(manifest['sources'])} file(s) (clock: {manifest['clock']})"]
    for src in manifest["sources"]:
        got = ", ".join(f"{g} {n:,}" for g, n in sorted(src["matched"].items())) or "nothing matched"
        if src["kind"] == "metrics":
            engines = ", ".join(src["startup"].get("metrics_engines", [])) or "no vllm: / sglang: metrics"
            got = f"metrics snapshot ({engines}); intervals ending here: " + (
                ", ".join(f"{g} {n:,}" for g, n in sorted(src["matched"].items())) or "none (the first snapshot)")
        ver = f"; {src['engine_version']}" if src.get("engine_version") else ""
        k = src.get("draft_tokens_per_verify")
        kk = f"; draft tokens per verify {k['k']} ({k['source']})" if k else ""
        lines.append(f"  {src['path']}: {src['lines']:,} lines; {got}{ver}{kk}")
        if src["unmatched"]:
            lines.append(f"    {src['unmatched']:,} lines matched no grammar; the first:")
            for ex in src["unmatched_examples"]:
                why = f" ({ex['why']})" if ex.get("why") else ""
                lines.append(f"      line {ex['line']}: {ex['text'][:160]}{why}")
        if src["half_matched"]:
            lines.append(f"    {src['half_matched']:,} lines half-matched a grammar (not rows); the first:")
            for ex in src["half_match_examples"]:
                where = f"line {ex['line']}: " if ex["line"] else ""
                fld = f"field {ex['field']!r} " if ex["field"] else ""
                lines.append(f"      {where}{ex['grammar']}: {fld}{ex['problem']}")
        for g, labels in src["unknown_fields"].items():
            shown = ", ".join(f"{lab!r} x{n:,}" for lab, n in sorted(labels.items(), key=lambda kv: -kv[1])[:8])
            lines.append(f"    {g}: unknown fields kept out of the row: {shown}")
        if src["invalid_utf8_lines"]:
            lines.append(f"    {src['invalid_utf8_lines']:,} lines had bytes that are not UTF-8 (replaced; the lines were read)")
        if src["overlong_lines"]:
            lines.append(f"    {src['overlong_lines']:,} lines longer than the 1 MiB limit were skipped")
        if src.get("year_assumed"):
            lines.append(f"    vLLM prints no year: {src['year_assumed']} (the file's modification time) assumed")
    return lines


def to_json(manifest: dict[str, Any], rows: int, out: str) -> dict[str, Any]:
    return LOGS.make({"output": out, "rows": rows, "clock": manifest["clock"], "sources": manifest["sources"],
                      "grammars": manifest["grammars"], "patterns": manifest["patterns"]})


__all__ = ["summary_lines", "to_json"]
