#!/usr/bin/env bash
# Run Odradek's test suite against real ZooKeeper, real broker processes and real clients.
#   scripts/test.sh              the suite CI runs (everything not marked slow)
#   ODRADEK_FULL=1 scripts/test.sh   also the slow fault scenarios
#   scripts/test.sh -k fetch     extra arguments go to pytest
#   ODRADEK_TEST_WORKERS=0 scripts/test.sh   one process (default: 2 pytest-xdist workers;
#                                a module's tests stay on one worker, tests/conftest.py)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
marker=(-m "not slow")
[ "${ODRADEK_FULL:-0}" = 1 ] && marker=()
n="${ODRADEK_TEST_WORKERS:-2}"
workers=(-n "$n" --dist loadscope)
[ "$n" = 0 ] && workers=(-p no:xdist)
exec .venv/bin/python -m pytest "${marker[@]}" "${workers[@]}" -p no:cacheprovider "$@"
