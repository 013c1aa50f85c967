"""Renderers: turn analyzer frames into rich tables, plain-language summaries and JSON documents."""
