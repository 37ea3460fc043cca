"""``python -m odradek`` is the ``odradek`` command (brokers are started this way)."""

import sys

# kio registers hypothesis strategies whenever hypothesis is importable -- it is in the
# test extra -- which costs ~0.2 s at every start of a broker process that never uses it.
if "hypothesis" not in sys.modules:
    sys.modules["hypothesis"] = None  # type: ignore[assignment]

from odradek.cli.main import main  # noqa: E402

raise SystemExit(main())
