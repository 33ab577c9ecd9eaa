"""Waiting in tests for what another thread or process does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest


def wait_until(check: Callable[[], object], what: str = "", *, timeout: float = 15.0) -> None:
    """Poll ``check`` every 50 ms until it is true; fail the test after ``timeout`` seconds,
    naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


async def until(check: Callable[[], object], what: str, *, timeout: float = 15.0) -> None:
    """Let the event loop run until ``check`` is true, looking every 10 ms; fail the test
    after ``timeout`` seconds, naming ``what`` was awaited (a bound against hanging, not a
    timing assertion)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)
