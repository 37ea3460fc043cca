#!/usr/bin/env bash
# Build librdkafka's own test suite from source and run it against a local 3-broker
# Odradek cluster, configured through tests/test.conf as librdkafka's tests/README.md
# describes for an existing cluster (no trivup).
#
#   bash scripts/librdkafka_suite.sh [--src DIR] [--tests "0001 0012 ..."] [--ci]
#                                    [--parallel N] [--out DIR] [--timeout SECONDS]
#
#   --src DIR     a librdkafka source tree (or set LIBRDKAFKA_SRC). Without one, the script
#                 clones https://github.com/confluentinc/librdkafka at LIBRDKAFKA_REF.
#   --tests LIST  test numbers to run (default: every broker test, 0000-0999, as `make`
#                 runs them; local and mock-cluster tests are skipped: they do not talk
#                 to the broker)
#   --ci          the bounded, stable subset CI runs (CI_TESTS below, ~2-3 minutes)
#   --out DIR     where the cluster, the logs and results.tsv go (default: a temp dir)
#
# The build is cached in ${ODRADEK_LIBRDKAFKA_BUILD:-~/.cache/odradek/librdkafka-build}
# (librdkafka is configured without SSL, SASL/GSSAPI, zstd and curl: not needed here).
# Output: one "test<TAB>PASSED|FAILED|SKIPPED" line per test in $OUT/results.tsv, the
# runner's log in $OUT/test-runner.log; exit status 1 if any selected test failed.
# Results and the reason for each failure are in docs/compatibility.md.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
SRC="${LIBRDKAFKA_SRC:-}"
REF="${LIBRDKAFKA_REF:-v2.15.0}"
BUILD="${ODRADEK_LIBRDKAFKA_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/odradek/librdkafka-build}"
TESTS=""
PARALLEL=2
OUT=""
TIMEOUT=3600
# Quick, stable, broker-facing tests (producer, consumer, groups, offsets, metadata,
# admin, compaction errors): each passes against Odradek in seconds. 0103 and 0129 are
# librdkafka's transactions and read_committed tests (fencing, aborts, KIP-890
# verification's refusals as the client sees them), ~1 minute together.
CI_TESTS="0001 0002 0005 0011 0012 0013 0015 0019 0021 0030 0031 0035 0040 0063 0103 0129"

while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC="$2"; shift 2 ;;
    --tests) TESTS="$2"; shift 2 ;;
    --ci) TESTS="$CI_TESTS"; shift ;;
    --parallel) PARALLEL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

OUT="${OUT:-$(mktemp -d /tmp/odradek-librdkafka.XXXXXX)}"
mkdir -p "$OUT"

# ---------------------------------------------------------------- build (cached)
if [ ! -x "$BUILD/tests/test-runner" ]; then
  if [ -z "$SRC" ]; then
    SRC="$OUT/librdkafka-src"
    git clone --depth 1 --branch "$REF" https://github.com/confluentinc/librdkafka "$SRC"
  fi
  rm -rf "$BUILD"
  mkdir -p "$(dirname "$BUILD")"
  cp -a "$SRC" "$BUILD"
  (
    cd "$BUILD"
    ./configure --disable-ssl --disable-gssapi --disable-zstd --disable-curl > "$OUT/configure.log" 2>&1
    make -j"$(nproc)" libs > "$OUT/build.log" 2>&1
    make -C tests -j"$(nproc)" build >> "$OUT/build.log" 2>&1
  ) || { echo "librdkafka build failed: see $OUT/build.log" >&2; exit 2; }
fi

# ---------------------------------------------------------------- cluster
CLUSTER="$OUT/cluster"
cleanup() { "$PY" -m odradek cluster down --dir "$CLUSTER" > /dev/null 2>&1 || true; }
trap cleanup EXIT
# auto.create.topics.enable and num.partitions=4: what librdkafka's trivup clusters use.
# An ACL authorizer that allows what no ACL names: 0081_admin creates, describes and
# deletes ACLs (SECURITY_DISABLED without an authorizer), and nothing else is denied.
BOOTSTRAP="$("$PY" -m odradek cluster up --brokers 3 --dir "$CLUSTER" \
  --broker-config auto.create.topics.enable=true --broker-config num.partitions=4 \
  --broker-config authorizer.class.name=kafka.security.authorizer.AclAuthorizer \
  --broker-config allow.everyone.if.no.acl.found=true \
  2> "$OUT/cluster-up.log")"

cat > "$OUT/test.conf" <<EOF
metadata.broker.list=$BOOTSTRAP
test.timeout.multiplier=3
test.topic.random=true
EOF

# ---------------------------------------------------------------- run
cd "$BUILD/tests"
export LD_LIBRARY_PATH="$BUILD/src:$BUILD/src-cpp"
export RDKAFKA_TEST_CONF="$OUT/test.conf"
# The broker version gates which tests run (TEST_BRKVER): Odradek implements Kafka
# 3.7's protocol (ZooKeeper mode).
export TEST_KAFKA_VERSION="${TEST_KAFKA_VERSION:-3.7.0}"
status=0
if [ -n "$TESTS" ]; then
  for t in $TESTS; do
    TESTS="$t" timeout "$TIMEOUT" ./test-runner -L -Q -D >> "$OUT/test-runner.log" 2>&1 || status=1
  done
else
  timeout "$TIMEOUT" ./test-runner -L -Q -D -p"$PARALLEL" > "$OUT/test-runner.log" 2>&1 || status=1
fi

# One line per test: its final verdict (a test passes only if no sub-test failed).
sed 's/\x1b\[[0-9;]*m//g' "$OUT/test-runner.log" | "$PY" -c '
import re, sys
verdict = {}
for line in sys.stdin:
    m = re.search(r"Test (\S+) (PASSED|FAILED|SKIPPED)", line)
    if m:
        verdict.setdefault(m.group(1), set()).add(m.group(2))
    m = re.search(r"### Test \"([^\" ]+)", line)
    if m and not m.group(1).startswith("<"):
        verdict.setdefault(m.group(1), set()).add("FAILED")
for name in sorted(verdict):
    v = verdict[name]
    print(name + "\t" + ("FAILED" if "FAILED" in v else "PASSED" if "PASSED" in v else "SKIPPED"))
' > "$OUT/results.tsv"
cat "$OUT/results.tsv"
if grep -q "FAILED" "$OUT/results.tsv"; then status=1; fi
echo "results: $OUT/results.tsv, log: $OUT/test-runner.log" >&2
exit "$status"
