"""``python -m odradek`` is the ``odradek`` command."""

from odradek.cli.main import main

raise SystemExit(main())
