"""Issue 24, a session without dead ends, through the real command line: global options
anywhere on the command line; models that say how they were built (ONNX metadata, the
engine's sidecar) read back by ``run`` and ``inspect``; state carried across calls with
``--state-from``."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_cli, sample

NET, WEIGHTS = sample("seq_classifier")


def _same_but_timing(text: str) -> str:
    """``text`` with measured seconds blanked (two builds never take the same time)."""
    return re.sub(r"\d+\.\d+ s\b", "<t> s", text)


@pytest.mark.parametrize("option", [("-q",), ("-v",), ("--debug",), ("--max-memory", "1K")],
                         ids=lambda o: o[0])
def test_a_global_option_means_the_same_before_and_after_the_command(tmp_path, option):
    net = NET
    if option[0] == "--debug":  # an error shows whether the traceback was asked for
        net = tmp_path / "broken.prototxt"
        net.write_text("layer { name: 'x' type: 'NoSuchLayer' bottom: 'a' top: 'b' }\n")
    engine = tmp_path / "net.engine"
    before = run_cli(*option, "convert", net, "-w", WEIGHTS, "-o", engine)
    after = run_cli("convert", net, "-w", WEIGHTS, "-o", engine, *option)
    assert before.returncode == after.returncode, (before.stderr, after.stderr)
    assert _same_but_timing(before.stdout) == _same_but_timing(after.stdout)
    if option[0] == "--debug":  # the traceback's own lines differ only in nothing we print
        assert "Traceback" in before.stderr and "Traceback" in after.stderr
    else:
        assert _same_but_timing(before.stderr) == _same_but_timing(after.stderr)
    expected = {"-q": lambda r: r.returncode == 0 and r.stdout == "",
                "-v": lambda r: r.returncode == 0 and "wrote" in r.stdout,
                "--debug": lambda r: r.returncode == 1,
                "--max-memory": lambda r: r.returncode == 1 and "limit 1 KiB" in r.stderr}
    assert expected[option[0]](after), after.stderr
