"""The signal handlers that save a worker's log rows before a stop signal takes effect (in this
process's main thread, with a stand-in previous handler; the default action, which ends the
process, in a child process here and on real worker processes in the cluster tests)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from placement.storage.shutdown import SignalSaver
from tests.placement.storage.conftest import Calls


def test_a_signal_saves_the_rows_then_goes_to_the_previous_handler(calls: Calls) -> None:
    saver = SignalSaver(calls.flush, calls.close)
    assert saver.install() == [signal.SIGTERM, signal.SIGINT]
    signal.raise_signal(signal.SIGTERM)
    assert calls.calls == ["flush", "previous SIGTERM"], "the rows first, then as before"
    saver.uninstall()
    assert signal.getsignal(signal.SIGTERM) == calls.previous
    signal.raise_signal(signal.SIGTERM)
    assert calls.calls[-1] == "previous SIGTERM" and calls.calls.count("flush") == 1


def test_a_signal_that_ends_the_process_closes_the_store_first(calls: Calls) -> None:
    saver = SignalSaver(calls.flush, calls.close, ending=[signal.SIGINT])
    saver.install()
    try:
        signal.raise_signal(signal.SIGINT)
    finally:
        saver.uninstall()
    assert calls.calls == ["close", "previous SIGINT"]


def test_a_stuck_save_delays_the_signal_by_the_timeout_only(calls: Calls) -> None:
    release = threading.Event()
    saver = SignalSaver(lambda: release.wait(30), calls.close, timeout_s=0.2)
    saver.install()
    start = time.monotonic()
    try:
        signal.raise_signal(signal.SIGTERM)
    finally:
        release.set()
        saver.uninstall()
    assert calls.calls == ["previous SIGTERM"]
    assert time.monotonic() - start < 20, "the handler went on without the stuck save"


def test_a_failing_save_still_goes_to_the_previous_handler(
    calls: Calls, caplog: pytest.LogCaptureFixture
) -> None:
    def failing() -> None:
        raise OSError(28, "No space left on device")

    saver = SignalSaver(failing, calls.close)
    saver.install()
    try:
        signal.raise_signal(signal.SIGTERM)
    finally:
        saver.uninstall()
    assert calls.calls == ["previous SIGTERM"]
    assert "No space left on device" in caplog.text


def test_ignored_signals_stay_ignored_and_other_threads_install_nothing(calls: Calls) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    saver = SignalSaver(calls.flush, calls.close)
    assert saver.install() == [signal.SIGTERM]
    saver.uninstall()
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN

    installed: list[object] = []
    thread = threading.Thread(target=lambda: installed.append(saver.install()))
    thread.start()
    thread.join(30)
    assert installed == [[]] and signal.getsignal(signal.SIGTERM) == calls.previous


def test_a_handler_set_later_is_left_in_place(calls: Calls) -> None:
    saver = SignalSaver(calls.flush, calls.close)
    saver.install()

    def later(signum: int, frame: Any) -> None:
        calls.calls.append("later")

    signal.signal(signal.SIGTERM, later)
    saver.uninstall()
    assert signal.getsignal(signal.SIGTERM) == later
    assert signal.getsignal(signal.SIGINT) == calls.previous, "still the saver's: restored"


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        SignalSaver(lambda: None, lambda: None, timeout_s=0)


def test_savers_uninstalled_in_the_order_they_were_installed_restore_the_first_handler(
    calls: Calls,
) -> None:
    """Two workers in one process: the first one's saver goes while the second's is on top
    of it. Once both are gone the handler from before is back, and in between a signal
    goes through the second saver straight to it, not through the first one's store."""
    first, second = Calls(), Calls()
    a = SignalSaver(first.flush, first.close)
    b = SignalSaver(second.flush, second.close)
    a.install()
    b.install()
    a.uninstall()
    assert signal.getsignal(signal.SIGTERM) == b._handle, "b's stays on top"
    signal.raise_signal(signal.SIGTERM)
    assert (first.calls, second.calls) == ([], ["flush"])
    assert calls.calls == ["previous SIGTERM"]
    b.uninstall()
    for sig in (signal.SIGTERM, signal.SIGINT):
        assert signal.getsignal(sig) == calls.previous, sig


def test_a_saver_gone_from_under_a_default_action_lets_the_one_above_close_its_store(
    tmp_path: Path,
) -> None:
    """Under the default action a signal ends the process: the saver on top must close its
    own store, and the one it chained to, gone, must save nothing (its store is closed)."""
    said = tmp_path / "said"
    script = textwrap.dedent(
        f"""
        import signal
        from placement.storage.shutdown import SignalSaver

        def note(what):
            return lambda: open({str(said)!r}, "a").write(what + "\\n")

        a = SignalSaver(note("a flush"), note("a close"))
        b = SignalSaver(note("b flush"), note("b close"))
        a.install()
        b.install()
        a.uninstall()
        signal.raise_signal(signal.SIGTERM)
        note("survived")()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
    assert done.returncode == -signal.SIGTERM, "the default action ended the process"
    assert said.read_text().splitlines() == ["b close"]
