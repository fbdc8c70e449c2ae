"""The server's stop on SIGINT / SIGTERM is never a forced exit, even when the two arrive
together (a Ctrl-C to the process group, then the parent's SIGTERM to its workers): a forced
exit skips the lifespan's shutdown, whose runtime then closes under a cancellation."""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette

from haki_context.cli import _server_class


def _server() -> Any:
    return _server_class()(uvicorn.Config(Starlette(), lifespan="off"))


def _interrupted_at(step: int) -> tuple[Any, bool]:
    """A server whose SIGINT handler is interrupted by a SIGTERM at its `step`-th line, as a
    signal arriving between two bytecodes runs its handler there. (server, whether it ran)."""
    server = _server()
    seen = 0
    injected = False

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal seen, injected
        if event == "line" and not injected:
            if seen == step:
                injected = True
                server.handle_exit(signal.SIGTERM, None)
            seen += 1
        return trace

    def start(frame: FrameType, event: str, arg: object) -> Any:
        return trace if event == "call" and frame.f_code.co_name == "handle_exit" else None

    sys.settrace(start)
    try:
        server.handle_exit(signal.SIGINT, None)
    finally:
        sys.settrace(None)
    return server, injected


def test_a_sigterm_inside_the_sigint_handler_never_forces_the_exit() -> None:
    step = 0
    while True:
        server, ran = _interrupted_at(step)
        if not ran:
            break  # every line of the handler (and what it calls) has been interrupted once
        assert server.should_exit and not server.force_exit, f"a SIGTERM at line {step} forced the exit"
        step += 1
    assert step >= 1


def test_signals_in_any_order_stop_without_forcing() -> None:
    for order in ([signal.SIGINT, signal.SIGINT], [signal.SIGTERM, signal.SIGINT], [signal.SIGINT, signal.SIGTERM]):
        server = _server()
        for sig in order:
            server.handle_exit(sig, None)
        assert server.should_exit and not server.force_exit, order
