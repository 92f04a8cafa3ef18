"""pipeline.core.single_flight: one holder per key at a time; different keys do not wait for each other."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from memtrace_loop.pipeline.core.single_flight import KeyedLocks


def test_holders_of_one_key_take_turns() -> None:
    locks, inside, most = KeyedLocks(), [0], [0]
    guard = threading.Lock()

    def work(_: int) -> None:
        with locks.hold("k"):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.002)
            with guard:
                inside[0] -= 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(32)))
    assert most[0] == 1


def test_holders_of_different_keys_run_at_once() -> None:
    locks, barrier = KeyedLocks(), threading.Barrier(3, timeout=5)

    def work(key: str) -> None:
        with locks.hold(key):
            barrier.wait()  # breaks (raises) if the three holders could not be inside together

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(work, ("a", "b", "c")))


def test_forget_drops_the_lock_of_a_key_seen_once() -> None:
    locks = KeyedLocks()
    with locks.hold("kept"):
        pass
    with locks.hold("once", forget=True):
        assert set(locks.held_keys()) == {"kept", "once"}
    assert locks.held_keys() == ("kept",)
