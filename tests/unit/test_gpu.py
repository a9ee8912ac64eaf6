"""The lock-file GPU slot allocator, with simulated devices."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from miaflow.compute import gpu_slot, visible_devices


def test_no_device_means_no_slot(tmp_path):
    with gpu_slot(tmp_path, devices=[]) as device:
        assert device is None


def test_simulated_device_count(monkeypatch):
    monkeypatch.setenv("MIAFLOW_GPUS", "3")
    assert visible_devices() == ["0", "1", "2"]
    monkeypatch.delenv("MIAFLOW_GPUS")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert visible_devices() == ["4", "6"]


def test_concurrent_holders_get_distinct_devices(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with gpu_slot(tmp_path, devices=["5", "7"]) as first:
        assert os.environ["CUDA_VISIBLE_DEVICES"] == first == "5"
        with gpu_slot(tmp_path, devices=["5", "7"]) as second:
            assert second == "7"
            assert os.environ["CUDA_VISIBLE_DEVICES"] == "7"
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_a_slurm_job_uses_its_granted_gpu_without_a_slot(tmp_path, monkeypatch):
    """Jobs on other nodes number their devices from 0 too: a shared slot file would serialise
    them."""
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with gpu_slot(tmp_path / "slots") as first, gpu_slot(tmp_path / "slots") as second:
        assert first == second == "0"
    assert not (tmp_path / "slots").exists()


def test_a_job_waits_for_a_free_slot_held_by_another_process(tmp_path):
    code = textwrap.dedent(f"""
        import time
        from miaflow.compute import gpu_slot
        with gpu_slot({str(tmp_path)!r}, poll_seconds=0.05, devices=["0"]) as device:
            print(device, time.time())
    """)
    with gpu_slot(tmp_path, devices=["0"]):
        waiter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            waiter.wait(timeout=1.0)
            raise AssertionError("the second job did not wait for the held slot")
        except subprocess.TimeoutExpired:
            pass
        released = time.time()
    out, _ = waiter.communicate(timeout=30)
    device, acquired = out.split()
    assert device == "0" and float(acquired) >= released
