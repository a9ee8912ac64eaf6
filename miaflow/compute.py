"""Where torch computes: the job's device, its GPU slot, deterministic kernels.

GPU slots: Snakemake's `--resources gpu=N` only limits how many GPU jobs run at once; it never
says *which* device a job should use (snakemake issue #281). A job therefore takes the first free
slot `<lock_dir>/<k>` with an exclusive `flock` and exports `CUDA_VISIBLE_DEVICES` before torch
touches CUDA. The lock dies with the process, so a killed job never leaks its slot.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_LOCK_DIR = Path(".snakemake/gpu-slots")


def visible_devices() -> list[str]:
    """Device ids this process may use, without initialising CUDA.

    `MIAFLOW_GPUS=<n>` simulates n devices (tests, or to cap usage); otherwise
    `CUDA_VISIBLE_DEVICES` if set, else the devices `nvidia-smi -L` lists, else none.
    """
    simulated = os.environ.get("MIAFLOW_GPUS")
    if simulated is not None:
        return [str(k) for k in range(int(simulated))]
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return [str(k) for k, line in enumerate(result.stdout.splitlines()) if line.startswith("GPU ")]


@contextmanager
def gpu_slot(
    lock_dir: str | os.PathLike = DEFAULT_LOCK_DIR,
    poll_seconds: float = 0.5,
    devices: list[str] | None = None,
) -> Iterator[str | None]:
    """Hold one free device while the block runs; yields its id, or None on a CPU-only machine.

    Inside a SLURM job the devices SLURM granted are this job's alone (it exports them as
    CUDA_VISIBLE_DEVICES): the job uses them without a slot, as lock files would be shared with
    jobs on other nodes that number their own devices from 0 too."""
    devices = visible_devices() if devices is None else devices
    if not devices:
        yield None
        return
    if os.environ.get("SLURM_JOB_ID") and os.environ.get("CUDA_VISIBLE_DEVICES"):
        log.info("using the GPU SLURM granted (device %s)", devices[0])
        yield devices[0]
        return
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for slot, device in enumerate(devices):
            handle = open(lock_dir / str(slot), "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            previous = os.environ.get("CUDA_VISIBLE_DEVICES")
            os.environ["CUDA_VISIBLE_DEVICES"] = device
            log.info("holding GPU slot %d (device %s)", slot, device)
            try:
                yield device
            finally:
                if previous is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = previous
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        time.sleep(poll_seconds)


def torch_device() -> str:
    """CUDA when visible (the job holds a GPU slot), else CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def use_deterministic_algorithms(compiled: bool) -> None:
    """`torch.use_deterministic_algorithms(True, warn_only=True)`, without its start-up cost
    where nothing is compiled: the public call also sets inductor's flag and imports
    `torch._inductor` to do so (about 2 s per job), so an uncompiled job sets the kernel flag
    alone, the call's only other effect."""
    import torch

    if compiled:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=True)
