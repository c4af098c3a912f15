"""Ctrl-C that a tuning run cannot lose.

Python turns SIGINT into a KeyboardInterrupt raised at whatever bytecode the main thread runs
next. Where that bytecode is Python code called from C code that clears any error it meets (an
attribute probe in an extension module, a callback whose error is dropped), the exception
vanishes without a trace, and the run goes on to its end and exits 0 as if it had never been
interrupted. Once in CI `flashgen tune`, sent SIGINT mid-run, did exactly that (stderr empty,
exit 0); this is one explanation that fits (not reproduced in 60 runs here). So the tuner's
SIGINT handler remembers the signal as well as raising, and the search asks
(`raise_if_interrupted`) between candidates and after its last task: a swallowed Ctrl-C stops
the run at the next candidate instead of never.
"""

from __future__ import annotations

import signal

_pending = False


def remember() -> None:
    """Note a SIGINT (for handlers of their own, such as a worker's)."""
    global _pending
    _pending = True


def _on_sigint(_signum, _frame) -> None:
    remember()
    raise KeyboardInterrupt


def install() -> None:
    """At the start of a run: forget any earlier SIGINT (a process that runs the CLI twice), and
    catch SIGINT with the remembering handler where Python's default handler holds it; a process
    that ignores SIGINT (nohup) or has a handler of its own keeps it."""
    reset()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def interrupted() -> bool:
    """Whether a SIGINT came since the process started (or since `reset`)."""
    return _pending


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if a SIGINT came, whether or not its own exception got through."""
    if _pending:
        raise KeyboardInterrupt


def reset() -> None:
    """Forget a SIGINT (a new run; tests that simulate one in the test process)."""
    global _pending
    _pending = False
