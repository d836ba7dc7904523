"""gc_paused turns the cyclic collector off for its block and back on after the last block running at once."""

from __future__ import annotations

import gc
import threading

from evalpack.core.gcpause import gc_paused


def test_the_collector_is_off_inside_and_on_after():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still runs
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_blocks_in_two_threads_turn_it_back_on_only_when_both_have_ended():
    inside, release, seen = threading.Event(), threading.Event(), []

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(30)

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(30)
    with gc_paused():
        pass
    seen.append(gc.isenabled())  # this thread's block ended, the other's has not
    release.set()
    thread.join(30)
    assert seen == [False] and gc.isenabled()


def test_the_collector_is_on_again_after_an_exception():
    try:
        with gc_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()
