"""Every ``faultfleet`` command line shown in README.md and docs/*.md parses with the real
argument parser (:func:`faultfleet_apps.cli.main.build_parser`), without running it.

Command lines come from fenced code blocks (one per line, ``\\`` continuations joined, a
``$`` prompt and ``#`` comments dropped, cut at a pipe or redirection) and from inline code
spans that start with ``faultfleet`` followed by an option or a command name (other spans,
such as the signing prefix ``faultfleet signed message v1\\0``, are text). A span that only
names a command (```faultfleet sim```) must name a real one. Placeholders: an upper-case
word (``FILE``, ``DIR``, ``K``, ``FIRST-LAST``) stands for ``1``, which every option taking
a number, a path or a name accepts; ``[...]`` around optional words is dropped, the words
kept.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from coordinator.strategies.registry import parse_options
from faultfleet_apps.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_-]*$")
OPERATORS = {"|", "||", "&", "&&", ";", ">", ">>", "<", "2>", "2>&1", "&>"}


@dataclass(frozen=True)
class Shown:
    """A command line as a document shows it."""

    where: str
    text: str
    inline: bool


def fenced_lines(lines: list[str], where: str) -> list[Shown]:
    """Command lines of the fenced code blocks, continuations joined."""
    shown: list[Shown] = []
    inside, pending, start = False, "", 0
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        text = re.sub(r"^\s*\$\s+", "", line) if not pending else line
        if not pending:
            start = number
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        shown.append(Shown(f"{where}:{start}", pending + text, inline=False))
        pending = ""
    return shown


def inline_spans(lines: list[str], where: str) -> list[Shown]:
    """Inline code spans of the prose (outside fenced blocks), also across a line break."""
    prose: list[str] = []
    inside = False
    for line in lines:
        if FENCE.match(line):
            inside = not inside
            prose.append("")
            continue
        prose.append("" if inside else line)
    text = "\n".join(prose)
    return [
        Shown(f"{where}:{text.count(chr(10), 0, m.start()) + 1}", " ".join(m[1].split()), True)
        for m in SPAN.finditer(text)
    ]


def shown_commands() -> list[Shown]:
    """Every ``faultfleet`` command line of the documents."""
    found: list[Shown] = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        where = str(path.relative_to(ROOT))
        for shown in fenced_lines(lines, where) + inline_spans(lines, where):
            words = words_of(shown.text)
            if words and (words[0] == "faultfleet" or words[0].endswith("/bin/faultfleet")):
                found.append(shown)
    return found


def words_of(text: str) -> list[str]:
    """Shell words up to the first pipe or redirection, comments dropped."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    try:
        for word in lexer:
            if word in OPERATORS:
                break
            words.append(word)
    except ValueError:  # an unbalanced quote: not a command line
        return []
    return words


def arguments(words: list[str]) -> list[str]:
    """The words after ``faultfleet``, placeholders filled in and optional brackets dropped."""
    unbracketed = [w.removeprefix("[").removesuffix("]") for w in words[1:]]
    return [
        "1"
        if PLACEHOLDER.match(w)
        else re.sub(r"=([A-Z][A-Z0-9_-]*)$", "=1", w)
        if w.startswith("--") or "=" in w
        else w
        for w in unbracketed
        if w not in ("...", "…")
    ]


def command_names(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> set[str]:
    """Every command path: "sim", "signals", "signals inspect", …"""
    names = {" ".join(path)}
    for action in parser._actions:  # argparse has no public way to walk subcommands
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                names |= command_names(sub, (*path, name))
    return names


SHOWN = shown_commands()
PARSER = build_parser()
NAMES = command_names(PARSER)


def test_the_documents_show_commands_of_every_kind() -> None:
    assert len([s for s in SHOWN if not s.inline]) >= 30
    assert len([s for s in SHOWN if s.inline]) >= 20
    assert any("\\" in Path(ROOT / s.where.split(":")[0]).read_text() for s in SHOWN)


def is_command_line(shown: Shown) -> bool:
    """Fenced lines always are; an inline span when an option or a command follows."""
    words = words_of(shown.text)
    return not shown.inline or (len(words) > 1 and (words[1].startswith("-") or words[1] in NAMES))


@pytest.mark.parametrize("shown", SHOWN, ids=lambda s: f"{s.where} {s.text[:60]}")
def test_a_documented_command_parses(shown: Shown, capsys: pytest.CaptureFixture[str]) -> None:
    # Prepare
    args = arguments(words_of(shown.text))
    if not is_command_line(shown):
        return  # text that starts with the word, not a command line
    if shown.inline and " ".join(args) in NAMES:
        return  # the span names a command, as in `faultfleet sim`
    # Execute
    try:
        PARSER.parse_args(args)
    except SystemExit as exit_:
        # Assert: --help and --version exit with 0 once parsed
        if exit_.code == 0:
            return
        pytest.fail(
            f"{shown.where}: `{shown.text}` does not parse (exit {exit_.code}): "
            f"{capsys.readouterr().err.strip().splitlines()[-1]}"
        )


@pytest.mark.parametrize("shown", SHOWN, ids=lambda s: f"{s.where} {s.text[:60]}")
def test_a_documented_strategy_option_is_one_its_table_takes(shown: Shown) -> None:
    """``--option KEY=VALUE`` shown with ``faultfleet sim`` is read by the strategy's
    parameter table: a real option, a value of its type and in its range."""
    args = arguments(words_of(shown.text))
    if not is_command_line(shown) or args[:1] != ["sim"] or "--option" not in args:
        return
    parsed = PARSER.parse_args(args)

    parse_options(parsed.strategy, parsed.option)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("faultfleet sim --out DIR --seed S  # a comment", ["sim", "--out", "1", "--seed", "1"]),
        ("faultfleet sim --option n_clusters=K --out x", ["sim", "--option", "n_clusters=1"]),
        ("faultfleet demo | tee demo.log", ["demo"]),
        ("faultfleet sim [--option version=2] --out x", ["sim", "--option", "version=2"]),
        ("faultfleet signals inspect a.wav > report.txt", ["signals", "inspect", "a.wav"]),
    ],
)
def test_command_lines_are_read_like_a_shell_reads_them(text: str, expected: list[str]) -> None:
    assert arguments(words_of(text))[: len(expected)] == expected


def test_fenced_blocks_join_continuations_and_drop_prompts() -> None:
    lines = ["```", "$ faultfleet bench --suite tiny \\", "    --out b", "```", "faultfleet x"]

    shown = fenced_lines(lines, "doc.md")

    assert [(s.where, words_of(s.text)) for s in shown] == [
        ("doc.md:2", ["faultfleet", "bench", "--suite", "tiny", "--out", "b"])
    ]


def test_an_inline_span_is_a_command_line_when_a_command_or_option_follows() -> None:
    spans = inline_spans(["`faultfleet signed message v1\\0` `faultfleet --version`"], "d.md")

    assert [is_command_line(s) for s in spans] == [False, True]


def test_inline_spans_may_cross_a_line_break() -> None:
    lines = ["run `faultfleet agent", "--config a.toml --retire` to retire it"]

    assert [s.text for s in inline_spans(lines, "doc.md")] == [
        "faultfleet agent --config a.toml --retire"
    ]
