"""Every console example of README.md and docs/cli.md (```console blocks) runs as written and
prints what it shows (issue 24).

A block is a sequence of ``$ caffe-lstm ...`` commands (``\\`` continues a line), each followed
by its output: standard error, then standard output. The commands of one block run in order in
one scratch folder holding ``samples/`` (a link to the repository's), so that a later command
reads what an earlier one wrote. In the shown output a line ``...`` stands for any number of
lines, and two numbers match when they agree to 1e-3 relative or are both below 1e-4 (the
error columns of ``verify``, whose last digits depend on the machine's float rounding).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "cli.md")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def console_blocks(path: Path) -> list[tuple[int, list[tuple[str, list[str]]]]]:
    """(line number, [(command, shown output lines)]) of each ```console block of ``path``."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```console":
            index += 1
            continue
        start, steps = index + 1, []
        index += 1
        while lines[index].strip() != "```":
            line = lines[index]
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\"):
                    index += 1
                    command = command[:-1] + " " + lines[index].strip()
                steps.append((command, []))
            else:
                steps[-1][1].append(line)
            index += 1
        blocks.append((start, steps))
        index += 1
    return blocks


def _cases() -> list:
    return [pytest.param(path, steps, id=f"{path.name}:{line}")
            for path in DOCUMENTS for line, steps in console_blocks(path)]


def _line_matches(shown: str, printed: str) -> bool:
    shown_parts, printed_parts = _NUMBER.split(shown), _NUMBER.split(printed)
    shown_numbers, printed_numbers = _NUMBER.findall(shown), _NUMBER.findall(printed)
    if shown_parts != printed_parts or len(shown_numbers) != len(printed_numbers):
        return False
    return all(a == b or _close(float(a), float(b))
               for a, b in zip(shown_numbers, printed_numbers))


def _close(a: float, b: float) -> bool:
    return (abs(a) < 1e-4 and abs(b) < 1e-4) or abs(a - b) <= 1e-3 * max(abs(a), abs(b))


def output_matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is what ``shown`` shows (``...``: any number of lines)."""
    if not shown:
        return not printed
    if shown[0].strip() == "...":
        return any(output_matches(shown[1:], printed[skip:]) for skip in range(len(printed) + 1))
    return bool(printed) and _line_matches(shown[0], printed[0]) \
        and output_matches(shown[1:], printed[1:])


def test_the_docs_have_console_examples():
    assert len(_cases()) >= 5


def test_the_matching_sees_a_difference():
    assert output_matches(["probs  (1, 2)  min 0.1", "..."], ["probs  (1, 2)  min 0.10001", "x"])
    assert not output_matches(["probs  (1, 2)  min 0.1"], ["probs  (1, 2)  min 0.2"])
    assert not output_matches(["error: a"], ["error: a", "more"])
    assert output_matches(["err 4.47e-08 ok"], ["err 2.9e-08 ok"])


@pytest.mark.parametrize("document, steps", _cases())
def test_a_console_example_prints_what_it_shows(tmp_path, document, steps):
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])))
    for command, shown in steps:
        argv = shlex.split(command)
        assert argv[0] == "caffe-lstm", f"{document.name}: not a caffe-lstm command: {command}"
        done = subprocess.run([sys.executable, "-m", "caffe_lstm", *argv[1:]], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=600)
        printed = (done.stderr + done.stdout).splitlines()
        assert output_matches(shown, printed), (
            f"{document.name}: `{command}` printed:\n" + "\n".join(printed)
            + "\nthe document shows:\n" + "\n".join(shown))
