#!/usr/bin/env bash
# The main job: a local Odradek cluster (real ZooKeeper + brokers), a demo workload, shutdown.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/odradek demo "$@"
