"""docs/cli.md's command table names every command of the parser, and no command the parser lacks.

The parser is the one `lsm` runs (`tools.commands.build_parser`); its commands are the leaves of its
subcommand tree (`sst show`, `log write`, `get`, ...), an alias counted once under its first name. A
table row is `| `lsm NAME ARGS...` | what it does |`; NAME is the lowercase words after `lsm` up to the
first argument (`FILE`, `[--x]`, `...`), one row per command.
"""

from __future__ import annotations

import argparse
import re

from tests.tools._cli import ROOT
from tools.commands import build_parser

CLI_MD = ROOT / "docs" / "cli.md"
_WORD = re.compile(r"[a-z][a-z0-9-]*")


def parser_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[str]:
    """The full names of the leaf commands under `parser`, in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names, seen = [], set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases map to the same parser object
                    seen.add(id(sub))
                    names += parser_commands(sub, (*prefix, name))
            return names
    return [" ".join(prefix)]


def table_commands(markdown: str) -> list[str]:
    """The command names of the first table whose header's first cell is `command`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\|\s*command\s*\|", line))
    names = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cell = re.split(r"(?<!\\)\|", line)[1].strip()  # a cell may hold an escaped pipe, \|
        m = re.fullmatch(r"`lsm ([^`]*)`", cell)
        assert m, f"docs/cli.md: a command table row must start with `lsm ...` in backticks: {line}"
        words = []
        for token in m.group(1).split():
            if not _WORD.fullmatch(token):
                break
            words.append(token)
        assert words, f"docs/cli.md: no command name in {cell}"
        names.append(" ".join(words))
    return names


def test_table_parsing_reads_names_up_to_the_first_argument():
    md = "| command | what |\n|---|---|\n| `lsm sst verify FILE\\|PATH...` | x |\n| `lsm bench ...` | y |\n"
    md += "| `lsm log show --follow DIR` | z |\n| `lsm seq-to-ts PATH SEQ` | w |\n\nafter\n"
    assert table_commands(md) == ["sst verify", "bench", "log show", "seq-to-ts"]


def test_parser_walk_finds_nested_commands_once():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    g = sub.add_parser("grp").add_subparsers()
    g.add_parser("one", aliases=["uno"])
    g.add_parser("two")
    sub.add_parser("solo")
    assert parser_commands(p) == ["grp one", "grp two", "solo"]


def test_cli_md_lists_every_command_and_only_those():
    in_parser = parser_commands(build_parser())
    in_table = table_commands(CLI_MD.read_text())
    duplicates = sorted({n for n in in_table if in_table.count(n) > 1})
    missing = [n for n in in_parser if n not in in_table]
    unknown = [n for n in in_table if n not in in_parser]
    assert not missing, f"docs/cli.md's command table lacks: {', '.join('lsm ' + n for n in missing)}"
    assert not unknown, f"docs/cli.md's command table names commands lsm lacks: {unknown}"
    assert not duplicates, f"docs/cli.md's command table lists these more than once: {duplicates}"
