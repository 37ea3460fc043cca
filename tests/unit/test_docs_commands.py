"""Docs that cannot drift: every ``odradek`` command in README.md's and docs/*.md's fenced
code blocks parses with the CLI's real argument parser (``odradek.cli.main.build_parser``
builds it without running anything), so a renamed or removed option or sub-command fails
here instead of in a reader's shell.

A command is a line of a fenced block (``\\`` continuations joined, a ``$ `` prompt and a
``sudo`` dropped) whose program is ``odradek``, a path ending in ``/odradek`` or
``python -m odradek``; a shell comment, pipe or redirect ends it. The docs' synopsis
notation is expanded and every variant parsed: ``[X]`` optional, ``(A | B)`` and
``a|b`` (within one word) alternatives.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from odradek.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_PROGRAM = re.compile(r"^(?:sudo\s+)?(?:\S*/)?(?:odradek|python3?\s+-m\s+odradek)\s")
_SHELL_STOPS = {"|", "||", "&&", ";", ">", ">>", "<", "2>&1", "&"}
_CLOSE = {"[": "]", "(": ")"}
MAX_VARIANTS = 64


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str  # as written, continuations joined


def doc_commands(path: Path, root: Path = ROOT) -> list[DocCommand]:
    """The odradek commands in ``path``'s fenced code blocks (named relative to ``root``)."""
    out: list[DocCommand] = []
    fence: str | None = None
    start, text = 0, ""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _FENCE.match(line)
        if m and not text:
            if fence is None:
                fence = m.group(1)
            elif m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if fence is None:
            continue
        if not text:
            start = n
        text = f"{text} {line.strip()}" if text else line.strip()
        if text.endswith("\\"):
            text = text[:-1].rstrip()
            continue
        command, text = text, ""
        if command.startswith("$ "):
            command = command[2:].lstrip()
        if _PROGRAM.match(command):
            out.append(DocCommand(f"{path.relative_to(root)}:{start}", command))
    return out


def _split_brackets(word: str) -> list[str]:
    """``[--topic`` -> ``[``, ``--topic``; ``P])`` -> ``P``, ``]``, ``)``; a value's own
    brackets (``cleanup.policy=[compact,delete]``) stay."""
    lead: list[str] = []
    while len(word) > 1 and word[0] in _CLOSE:
        lead.append(word[0])
        word = word[1:]
    trail: list[str] = []
    while len(word) > 1 and word[-1] in "])":
        opener = "[" if word[-1] == "]" else "("
        if word.count(opener) >= word.count(word[-1]):
            break  # closes a bracket of the word itself
        trail.insert(0, word[-1])
        word = word[:-1]
    return [*lead, word, *trail]


def tokens(text: str) -> list[str]:
    """The words after the program, brackets apart, up to a comment or (outside a
    synopsis group) a shell operator."""
    words = shlex.split(text, comments=True)
    if words[0] == "sudo":
        words = words[1:]
    words = words[3:] if words[0].startswith("python") else words[1:]
    out: list[str] = []
    depth = 0
    for k, w in enumerate(words):
        if depth == 0 and w in _SHELL_STOPS:
            if w == "|" and words[k + 1 : k + 2] and words[k + 1].startswith("-"):
                raise ValueError(
                    "a bare '|' between options: write each alternative on "
                    "its own line, or in parentheses"
                )
            break
        for t in _split_brackets(w):
            depth += (t in _CLOSE) - (t in ("]", ")"))
            out.append(t)
    return out


def _sequence(toks: list[str], i: int, closer: str | None) -> tuple[list[list[str]], int]:
    """Variants of one alternative: ``toks[i:]`` up to ``|`` or ``closer``."""
    variants: list[list[str]] = [[]]
    while i < len(toks) and toks[i] not in ("|", closer):
        t = toks[i]
        if t in _CLOSE:
            inner, i = _alternatives(toks, i + 1, _CLOSE[t])
            if t == "[":
                inner = [[], *inner]
        else:
            inner = [[w] for w in t.split("|")] if "|" in t and not t.startswith("-") else [[t]]
            i += 1
        variants = [v + x for v in variants for x in inner]
        assert len(variants) <= MAX_VARIANTS, f"over {MAX_VARIANTS} variants: {toks}"
    return variants, i


def _alternatives(toks: list[str], i: int, closer: str) -> tuple[list[list[str]], int]:
    out: list[list[str]] = []
    while True:
        seq, i = _sequence(toks, i, closer)
        out.extend(seq)
        if i >= len(toks):
            raise ValueError(f"unclosed {closer!r}")
        if toks[i] == closer:
            return out, i + 1
        i += 1  # "|"


def variants(text: str) -> list[list[str]]:
    """Every argument list the synopsis ``text`` stands for."""
    toks = tokens(text)
    out, i = _sequence(toks, 0, None)
    if i != len(toks):
        raise ValueError(
            f"unexpected {toks[i]!r} (one command a line: write alternatives "
            f"as separate lines or in parentheses)"
        )
    return out


@functools.cache
def _parser() -> argparse.ArgumentParser:
    return build_parser()  # parse_args keeps no state: one parser serves every command


_PLACEHOLDER = re.compile(r"invalid (?:int|float) value: '([A-Z][A-Z_]*)'$")


def parse_error(argv: list[str]) -> str | None:
    """What the real parser says about ``argv`` (None: it parses). A metavar standing
    for a number (``--partition P``) is not the doc's error: it is read as 1."""
    argv = list(argv)
    for _ in range(len(argv) + 1):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                _parser().parse_args(argv)
                return None
            except SystemExit as e:
                if e.code in (0, None):  # --help, --version
                    return None
        message = (err.getvalue().strip().splitlines() or ["(no message)"])[-1]
        m = _PLACEHOLDER.search(message)
        if m is None or m.group(1) not in argv:
            return message
        argv[argv.index(m.group(1))] = "1"
    return None


# ------------------------------------------------------------------------------ tests
def test_the_synopsis_notation_expands() -> None:
    assert variants("odradek a --x 1 [--y 2] # comment") == [
        ["a", "--x", "1"],
        ["a", "--x", "1", "--y", "2"],
    ]
    assert variants("odradek a (--t T [--p P] | --b N) --f jsonl|parquet") == [
        ["a", "--t", "T", "--f", "jsonl"],
        ["a", "--t", "T", "--f", "parquet"],
        ["a", "--t", "T", "--p", "P", "--f", "jsonl"],
        ["a", "--t", "T", "--p", "P", "--f", "parquet"],
        ["a", "--b", "N", "--f", "jsonl"],
        ["a", "--b", "N", "--f", "parquet"],
    ]
    assert variants("sudo .venv/bin/odradek c --add-config 'a=[x,y]' | grep z") == [
        ["c", "--add-config", "a=[x,y]"]
    ]
    assert variants("python -m odradek c --k v 2>&1") == [["c", "--k", "v"]]
    with pytest.raises(ValueError, match=r"bare '\|'"):
        variants("odradek t --list | --delete --topic t")


def test_doc_commands_are_found(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "odradek outside\n```bash\n$ odradek a \\\n   --b c\nls\n```\n"
        "~~~\n.venv/bin/odradek d  # e\n~~~\n"
    )
    assert doc_commands(doc, tmp_path) == [
        DocCommand("x.md:3", "odradek a --b c"),
        DocCommand("x.md:8", ".venv/bin/odradek d  # e"),
    ]


def test_every_subcommand_module_loads() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        build_parser()
    assert err.getvalue() == ""


def test_the_parser_refuses_unknown_options() -> None:
    assert parse_error(["topics", "--bootstrap-server", "B", "--list"]) is None
    assert "unrecognized arguments: --no-such-option" in (
        parse_error(["topics", "--bootstrap-server", "B", "--list", "--no-such-option"]) or ""
    )
    assert (
        parse_error(
            [
                "transactions",
                "--bootstrap-server",
                "B",
                "describe-producers",
                "--topic",
                "T",
                "--partition",
                "P",
            ]
        )
        is None
    )
    assert "invalid choice" in (parse_error(["no-such-command"]) or "")


_ALL = [c for doc in DOCS for c in doc_commands(doc)]


def test_the_docs_have_commands() -> None:
    assert len(_ALL) > 50


@pytest.mark.parametrize("cmd", _ALL, ids=[c.where for c in _ALL])
def test_doc_command_parses(cmd: DocCommand) -> None:
    failures = [
        f"{' '.join(argv)}: {err}"
        for argv in variants(cmd.text)
        if (err := parse_error(argv)) is not None
    ]
    assert failures == [], f"{cmd.where}: {cmd.text}"
