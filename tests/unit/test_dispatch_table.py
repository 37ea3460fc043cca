"""Every (API key) that protocol.versions.SERVED promises has a handler, and no handler
serves an API that is not advertised."""

from odradek.protocol.versions import SERVED
from odradek.server.dispatch import HANDLERS


def test_every_served_api_has_a_handler() -> None:
    assert set(HANDLERS) == set(SERVED)
