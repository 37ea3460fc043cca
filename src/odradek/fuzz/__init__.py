"""Fuzzing harness for hostile input (issue 11): corpus, mutator, harness; ``python -m odradek.fuzz``."""
