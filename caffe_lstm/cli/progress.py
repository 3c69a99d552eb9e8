"""The progress display of long commands (run, verify, export, convert): click's progress bar on
standard error, one bar per phase the library reports (the net's layers, a loop's steps,
TensorRT's build phases); nothing with -q or when standard error is not a terminal."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import click

from caffe_lstm.cli.options import GlobalOptions
from caffe_lstm.ir.walk import Progress

_CLEAR_LINE = "\r\033[K"
_SHOW_CURSOR = "\033[?25h"  # click's bar hides the cursor while it draws
#: Seconds between two drawings of a bar (a loop of short steps reports thousands a second).
_INTERVAL = 0.1


@contextlib.contextmanager
def progress_display(options: GlobalOptions) -> Iterator[Progress | None]:
    """Yields the ``progress(phase, done, total)`` callback to hand the library, or None when
    nothing is to be shown; the bar's line is cleared when the block ends."""
    if options.quiet or not sys.stderr.isatty():
        yield None
        return
    display = _Bars()
    try:
        yield display.show
    finally:
        display.close()


class _Bars:
    """One click progress bar per phase, drawn on one line: a phase that comes back (the
    layers after a loop's steps) finds its bar where it left it; one that starts over (a
    second loop of the same name, a TensorRT phase run again) gets a new bar."""

    def __init__(self) -> None:
        self.bars: dict[str, Any] = {}  # click's ProgressBar
        self.current = ""
        self.drawn = 0.0  # time.monotonic() of the last drawing

    def show(self, phase: str, done: int, total: int) -> None:
        bar = self.bars.get(phase)
        if bar is None or bar.length != max(total, 1) or done < bar.pos:  # new, or again
            bar = self.bars[phase] = click.progressbar(
                length=max(total, 1), label=phase[:40], file=sys.stderr, show_pos=True,
                width=24)
        now = time.monotonic()
        if phase != self.current:
            sys.stderr.write(_CLEAR_LINE)  # the last phase's line may be longer
            self.current = phase
            bar.render_progress()
        elif now - self.drawn < _INTERVAL and done < total:
            return  # drawn again at the next report after the interval, or at the end
        self.drawn = now
        bar.update(max(done - bar.pos, 0))

    def close(self) -> None:
        if self.bars:
            sys.stderr.write(_CLEAR_LINE + _SHOW_CURSOR)
            sys.stderr.flush()
