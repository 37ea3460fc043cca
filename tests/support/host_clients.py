"""Producer and consumer-group processes for tests that run clients on another host
(a netns client namespace): ``python host_clients.py produce|consume ...``.

Both write one line per event to ``--out`` and flush it, so the test can read
progress while they run; both stop when ``--stop`` exists (the consumer once it has
also read ``--expect-file``'s count, or at ``--deadline``).

produce: idempotent acks=all; a line ``<value>`` per *acknowledged* record.
consume: a consumer group member committing after each batch; a line per record.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer


def produce(args: argparse.Namespace) -> int:
    p = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
        }
    )
    with (
        open(args.out, "a", buffering=1) as out,
        open(args.out + ".errors", "a", buffering=1) as errors,
    ):

        def on_delivery(err: KafkaError | None, msg: object) -> None:
            if err is None:
                out.write(msg.value().decode() + "\n")  # type: ignore[attr-defined]
            else:
                errors.write(f"{err}\n")

        i = 0
        while not os.path.exists(args.stop):
            p.produce(args.topic, b"v%07d" % i, on_delivery=on_delivery)
            i += 1
            p.poll(0.002)  # ~a few hundred records/s: enough load, little CPU
        remaining = p.flush(120)
        errors.write(f"sent {i} unflushed {remaining}\n" if remaining else "")
    return 0


def consume(args: argparse.Namespace) -> int:
    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    c.subscribe([args.topic])
    seen: set[str] = set()
    deadline = time.monotonic() + args.deadline
    with open(args.out, "a", buffering=1) as out:
        while time.monotonic() < deadline:
            msgs = c.consume(500, 0.5)
            for m in msgs:
                if m.error() is None:
                    v = m.value().decode()
                    seen.add(v)
                    out.write(v + "\n")
            if msgs:
                try:
                    c.commit(asynchronous=False)
                except Exception as e:
                    print(f"commit: {e}", file=sys.stderr)
            if os.path.exists(args.stop) and os.path.exists(args.expect_file):
                want = {ln for ln in Path(args.expect_file).read_text().splitlines() if ln}
                if want and want <= seen:
                    break
    c.close()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("produce", "consume"))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--group", default="netns-group")
    ap.add_argument("--expect-file", default="")
    ap.add_argument("--deadline", type=float, default=240.0)
    args = ap.parse_args()
    return produce(args) if args.mode == "produce" else consume(args)


if __name__ == "__main__":
    sys.exit(main())
