"""Fuzzing harness for hostile input (issue 11): corpus, mutator, harness.

Run it with ``python -m odradek.fuzz`` (docs/security.md).
"""
