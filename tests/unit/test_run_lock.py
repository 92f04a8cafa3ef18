"""The run folder lock (`pipeline.core.run_lock`): one holder at a time, the second refused in one line
naming the folder and the holder's pid, and the lock gone with its process however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.run_lock import RunLocked, hold_run_lock, lock_holder, lock_is_free, pid_alive


def test_a_second_holder_is_refused_naming_the_folder_and_the_holder(tmp_path):
    assert lock_is_free(tmp_path)
    with hold_run_lock(tmp_path, "memtrace optimize"):
        assert not lock_is_free(tmp_path)
        assert f"pid {os.getpid()}" in lock_holder(tmp_path)
        with pytest.raises(RunLocked) as refused, hold_run_lock(tmp_path, "memtrace upload"):
            pass
    message = str(refused.value)
    assert isinstance(refused.value, ConfigError)  # exit code 2, the message printed as it is
    assert "\n" not in message and str(tmp_path) in message and f"pid {os.getpid()}" in message
    assert lock_is_free(tmp_path)
    with hold_run_lock(tmp_path, "memtrace upload"):  # free again once the block is left
        pass


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_lock_dies_with_its_process(tmp_path, how):
    script = ("import sys, time; from memtrace_loop.pipeline.core.run_lock import hold_run_lock\n"
              "with hold_run_lock(sys.argv[1], 'test'):\n    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert not lock_is_free(tmp_path) and pid_alive(holder.pid)
        with pytest.raises(RunLocked, match=f"pid {holder.pid} "), hold_run_lock(tmp_path, "second"):
            pass
        holder.send_signal(how)
        holder.wait(timeout=30)
    finally:
        holder.kill()
    deadline = time.monotonic() + 10
    while not lock_is_free(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock_is_free(tmp_path) and not pid_alive(holder.pid)
