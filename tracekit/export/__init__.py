"""Exporters (Perfetto protobuf, Chrome JSON) and trace validation."""
