"""The documentation against the code.

(a) docs/cli.md is the command-line contract. Every command of the click group
``caffe_lstm.cli.cli`` (walked recursively: ``weights`` is a subgroup with its own commands) has
one section headed ``## caffe-lstm <command path>``; the options table of that section (the
table whose header starts with ``Option``) lists in its first column, in backticks, exactly the
option spellings of the command (``opts`` and ``secondary_opts`` of its click Options, e.g.
``-o``, ``--output``, ``--trt``, ``--no-trt``). The group's own options are the
``## Global options`` section. ``-h``/``--help`` exist on every command and are left out on
both sides; hidden options and commands are left out of the code side.

(b) Nothing a user reads points into ``../shared``, a folder beside the repository that only
the project's own machines have: README.md, docs/*.md, benchmarks/README.md, the samples, the
``--help`` of every command, and the package source (its docstrings become ``--help`` text and
its strings error messages).
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from caffe_lstm.cli import cli

ROOT = Path(__file__).resolve().parents[1]
CLI_DOC = ROOT / "docs" / "cli.md"
PROG = "caffe-lstm"
GLOBAL_SECTION = "Global options"
HELP_SPELLINGS = frozenset({"-h", "--help"})
#: Mentions of the folder beside the repository that users' clones do not have.
FORBIDDEN = ("../shared", "shared/spec", "shared/corpus")

CommandPath = tuple[str, ...]


# ---- the code side ----------------------------------------------------------------------------


def walk(command: click.Command, path: CommandPath = ()) -> Iterator[tuple[CommandPath,
                                                                          click.Command]]:
    """(path, command) for ``command`` and every visible command below it, depth first."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            if not sub.hidden:
                yield from walk(sub, (*path, name))


#: Every command and subgroup, without the root group (whose options are the global ones).
COMMANDS: dict[CommandPath, click.Command] = {path: cmd for path, cmd in walk(cli) if path}


def option_spellings(command: click.Command) -> set[str]:
    """The option spellings that ``--help`` of ``command`` shows, help itself left out."""
    spellings = {spelling for param in command.params
                 if isinstance(param, click.Option) and not param.hidden
                 for spelling in (*param.opts, *param.secondary_opts)}
    return spellings - HELP_SPELLINGS


def title(path: CommandPath) -> str:
    return " ".join((PROG, *path))


# ---- the documentation side -------------------------------------------------------------------


def sections(text: str) -> dict[str, str]:
    """The body of every ``## `` section by its heading (headings inside code fences ignored).

    Raises AssertionError on a heading that appears twice.
    """
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if not in_fence and line.startswith("## "):
            heading = line[3:].strip()
            assert heading not in found, f"docs/cli.md has two sections '## {heading}'"
            current = found[heading] = []
        elif current is not None:
            current.append(line)
    return {heading: "\n".join(lines) for heading, lines in found.items()}


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def documented_options(section: str) -> set[str]:
    """The option spellings in the first column of the section's options tables: every
    backticked span, split at spaces, commas and slashes, tokens starting with ``-``."""
    spellings: set[str] = set()
    in_options_table = False
    for line in section.splitlines():
        if not line.lstrip().startswith("|"):
            in_options_table = False
            continue
        cells = _cells(line)
        if not in_options_table:
            # a table starts: its header row decides whether it is an options table
            in_options_table = cells[0] == "Option"
            continue
        if set(cells[0]) <= set("-: "):  # the |---|---| separator row
            continue
        for span in re.findall(r"`([^`]+)`", cells[0]):
            spellings.update(token for token in re.split(r"[\s,/]+", span)
                             if token.startswith("-"))
    return spellings - HELP_SPELLINGS


def documented_commands(doc: dict[str, str]) -> set[CommandPath]:
    """The command paths of the ``## caffe-lstm ...`` sections."""
    return {tuple(heading.split()[1:]) for heading in doc
            if heading.split()[0] == PROG and len(heading.split()) > 1}


@pytest.fixture(scope="module")
def cli_doc() -> dict[str, str]:
    assert CLI_DOC.is_file(), "docs/cli.md is missing"
    return sections(CLI_DOC.read_text(encoding="utf-8"))


def _difference(where: str, in_help: set[str], in_docs: set[str]) -> str:
    lines = [f"{where}: the options of --help and of docs/cli.md differ"]
    if in_help - in_docs:
        lines.append(f"  in --help, not documented: {', '.join(sorted(in_help - in_docs))}")
    if in_docs - in_help:
        lines.append(f"  documented, not in --help: {', '.join(sorted(in_docs - in_help))}")
    return "\n".join(lines)


# ---- (a) docs/cli.md lists every command and exactly its options ------------------------------


def test_every_command_is_documented_and_every_documented_command_exists(cli_doc):
    documented, real = documented_commands(cli_doc), set(COMMANDS)
    problems = [f"'{title(path)}' exists but docs/cli.md has no section '## {title(path)}'"
                for path in sorted(real - documented)]
    problems += [f"docs/cli.md documents '## {title(path)}', which is not a command"
                 for path in sorted(documented - real)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=title)
def test_documented_options_are_the_options_of_help(cli_doc, path):
    name = title(path)
    assert name in cli_doc, f"'{name}' has no section '## {name}' in docs/cli.md"
    in_help, in_docs = option_spellings(COMMANDS[path]), documented_options(cli_doc[name])
    assert in_docs == in_help, _difference(name, in_help, in_docs)


def test_global_options_are_documented(cli_doc):
    assert GLOBAL_SECTION in cli_doc, f"docs/cli.md has no section '## {GLOBAL_SECTION}'"
    in_help, in_docs = option_spellings(cli), documented_options(cli_doc[GLOBAL_SECTION])
    assert in_docs == in_help, _difference(f"{PROG} (global options)", in_help, in_docs)


def test_the_option_parser_of_the_docs():
    """The parser finds spellings in the first column of options tables only."""
    section = "\n".join([
        "| Option | Argument | Meaning |",
        "|---|---|---|",
        "| `-o`, `--output` | `FILE` | not `--this` |",
        "| `--trt` / `--no-trt` | none | |",
        "| `--max-memory SIZE` | | |",
        "",
        "| Status | Meaning |",
        "|---|---|",
        "| `--not-an-option-table` | |",
    ])
    assert documented_options(section) == {"-o", "--output", "--trt", "--no-trt",
                                           "--max-memory"}


# ---- (b) nothing a user sees points into ../shared ----------------------------------------------


def _mentions(text: str, where: str) -> list[str]:
    """``where:line: text`` for every line of ``text`` with a forbidden mention."""
    return [f"{where}:{number}: {line.strip()}"
            for number, line in enumerate(text.splitlines(), 1)
            if any(needle in line for needle in FORBIDDEN)]


def _user_documents() -> list[Path]:
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                 ROOT / "benchmarks" / "README.md"]
    documents += sorted(path for path in (ROOT / "samples").rglob("*")
                        if path.suffix in (".prototxt", ".py", ".md", ".txt"))
    return [path for path in documents if path.is_file()]


def test_documents_do_not_mention_shared():
    hits = [hit for path in _user_documents()
            for hit in _mentions(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not hits, "user documentation points outside the repository:\n" + "\n".join(hits)


def test_help_texts_do_not_mention_shared():
    runner, hits = CliRunner(), []
    for path, _ in walk(cli):
        result = runner.invoke(cli, [*path, "--help"], prog_name=PROG)
        assert result.exit_code == 0, f"{title(path)} --help failed:\n{result.output}"
        hits += _mentions(result.output, f"{title(path)} --help")
    assert not hits, "--help points outside the repository:\n" + "\n".join(hits)


def test_package_source_does_not_mention_shared():
    """Docstrings become --help and strings become messages: the whole source is checked."""
    hits = [hit for path in sorted((ROOT / "caffe_lstm").rglob("*.py"))
            for hit in _mentions(path.read_text(encoding="utf-8"),
                                 str(path.relative_to(ROOT)))]
    assert not hits, "caffe_lstm/ points outside the repository:\n" + "\n".join(hits)
