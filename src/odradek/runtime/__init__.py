"""Seams between the broker's runtime code and the world it runs in (time, for now).

The lowest layer: it imports nothing from odradek, so every other layer may use it."""
