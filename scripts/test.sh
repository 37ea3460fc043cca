#!/usr/bin/env bash
# Run Odradek's test suite against real ZooKeeper, real broker processes and real clients.
#   scripts/test.sh              the suite CI runs (everything not marked slow)
#   ODRADEK_FULL=1 scripts/test.sh   also the slow fault scenarios
#   scripts/test.sh -k fetch     extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
marker=(-m "not slow")
[ "${ODRADEK_FULL:-0}" = 1 ] && marker=()
exec .venv/bin/python -m pytest "${marker[@]}" -p no:cacheprovider "$@"
