"""The command line's process start-up: the cyclic garbage collector waits while the command's
modules are imported.

Importing numpy, protobuf and caffe-lstm makes some 50,000 objects (modules, classes,
functions) that live until the process exits; the collector would walk them about 70 times and
free nothing (5 to 10 ms of a ``caffe-lstm run``). ``main`` pauses it before the command is
looked up (which imports its module, and the API with it), and every command resumes it as it
starts (``group._Command.invoke``), so that what commands do (verify's runs, builds, bench's
loop, serving) is collected as usual. Resuming freezes what start-up made (``gc.freeze``: later
collections skip it; while paused it all stayed in the youngest generation, which the next
collection would otherwise walk whole); the interpreter's own collections at exit skip it too,
which shortens the process's exit by about 40 ms. A command invoked in-process (click's test
runner) never paused it, and resuming is then nothing.
"""

from __future__ import annotations

import gc

_paused = False


def pause_collector() -> None:
    """Pauses the cyclic garbage collector for the start-up (if it runs)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collector() -> None:
    """Resumes the collector ``pause_collector`` paused, freezing what start-up made."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
