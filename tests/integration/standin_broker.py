"""Test helper: a stand-in for ``odradek broker --config FILE`` (NOT a broker).

It does only what the cluster manager observes: reads server.properties, listens on
the listener address, and registers the ephemeral ``/brokers/ids/<id>`` with the real
client (bound to its own address) and codec; SIGTERM closes the session and exits.
Run as ``python standin_broker.py --config FILE``.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from pathlib import Path

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError

from odradek.zk import znodes
from odradek.zk.client import connect_zk


def read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            props[k.strip()] = v.strip()
    return props


def main() -> int:
    config = Path(sys.argv[sys.argv.index("--config") + 1])
    props = read_properties(config)
    broker_id = int(props["broker.id"])
    _listener, host, port = znodes.parse_endpoint(props["listeners"])
    server = socket.create_server((host, port), reuse_port=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def accept_loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                return

    threading.Thread(target=accept_loop, daemon=True).start()
    zk = connect_zk(
        props["zookeeper.connect"],
        source_ip=host,
        session_timeout_s=int(props.get("zookeeper.session.timeout.ms", "18000")) / 1000,
    )
    znodes.ensure_base_paths(zk)
    reg = znodes.encode_broker(znodes.BrokerRegistration.plaintext(broker_id, host, port))
    need_register = threading.Event()
    need_register.set()

    def on_state(state: str) -> None:
        if state == KazooState.CONNECTED:
            need_register.set()  # after a LOST session the ephemeral node is gone

    zk.add_listener(on_state)
    print(f"stand-in broker {broker_id} listening on {host}:{port}", flush=True)
    while not stop.is_set():
        if need_register.is_set():
            need_register.clear()
            try:
                zk.create(znodes.broker_path(broker_id), reg, ephemeral=True)
            except NodeExistsError:
                # Left by our previous incarnation's session: retry until it expires.
                stat = zk.exists(znodes.broker_path(broker_id))
                if stat is None or stat.ephemeralOwner != zk.client_id[0]:
                    need_register.set()
            except Exception as e:  # connection trouble: retry on next loop
                print(f"register failed: {e!r}", flush=True)
                need_register.set()
        stop.wait(0.1)
    zk.stop()
    zk.close()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
