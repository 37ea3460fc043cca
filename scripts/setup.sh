#!/usr/bin/env bash
# Install everything Odradek needs on a fresh Debian machine, idempotently:
#   - Java + ZooKeeper (Debian package `zookeeper`) and kcat, via apt when root;
#   - a Python virtual environment in .venv/ with Odradek and its clients.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
# The console's browser tests drive Debian's Chromium (Playwright never downloads one).
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "setup: apt-get install ${need_apt[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    else
        echo "setup: missing ${need_apt[*]} (run as root to install them with apt)" >&2
    fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$PY" -m venv .venv
fi
# Reinstall only when the project metadata changed (keeps repeated runs fast).
stamp=.venv/.odradek-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing Python packages into .venv"
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e '.[test,spark,chaos]'
    touch "$stamp"
fi
