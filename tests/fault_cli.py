"""``tracekit`` as a real process whose capture has one failing rank (the capture fault tests):

    python tests/fault_cli.py RANK@CYCLE:KIND capture ...     # KIND: exit | hang | raise

The built-in workload the command configures is wrapped in ``fault_workload.FaultyWorkload``
(through ``make_config``, which the capture command calls); the rank processes import that
module by name (spawn hands them this sys.path). Nothing of it is in tracekit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    spec, args = sys.argv[1], sys.argv[2:]
    who, rest = spec.split("@", 1)
    cycle, kind = rest.split(":", 1)

    from fault_workload import FaultyWorkload

    from tracekit.collectors.workload import config

    make = config.make_config

    def faulty(*a: Any, **k: Any) -> Any:
        return FaultyWorkload(make(*a, **k), int(who), int(cycle), kind)

    config.make_config = faulty  # type: ignore[assignment]
    sys.argv = ["tracekit", *args]
    from tracekit.cli import main as tracekit_main

    tracekit_main()


if __name__ == "__main__":
    main()
