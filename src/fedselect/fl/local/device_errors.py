"""Failures of the accelerator, told apart from failures of a client (issue 39).

A client that fails (an injected fault, a worker killed, host memory exhausted by one job) is
an outcome of the simulated federation: the round goes on without it. A GPU that runs out of
memory, loses its context or hits a device-side assert is not: it would fail every client the
same way, so marking them failed would make a run's results depend on the card it ran on.
Such an error stops the run with a :class:`DeviceError` that names the device and what to do.

Usage (what :class:`fedselect.fl.local.pool.ClientTrainer` does around its GPU work)::

    with on_device(device, f"training {len(jobs)} clients stacked"):
        results = train_batched(model, data, jobs, cfg, device)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

#: how PyTorch words a failure of the CUDA runtime, driver or libraries in a RuntimeError ("CUDA
#: error: an illegal memory access was encountered", "cuDNN error: CUDNN_STATUS_...", "CUDA error:
#: CUBLAS_STATUS_..."); a bug that merely names the device ("Expected all tensors to be on the
#: same device, but found cuda:0 and cpu") is not one
_CUDA_ERRORS = (
    "cuda error",
    "cuda driver error",
    "cudnn error",
    "cudnn_status_",
    "cublas_status_",
    "cufft error",
    "cusolver error",
    "cusparse error",
    "nccl error",
    "device-side assert",
)


class DeviceError(RuntimeError):
    """The accelerator failed (out of memory, a CUDA runtime error); the message names the
    device, what was being done, the original error, and what to do."""


def is_device_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the accelerator: ``torch.OutOfMemoryError`` (CUDA's
    out-of-memory), ``torch.AcceleratorError`` (PyTorch >= 2.8), or a ``RuntimeError`` whose
    message is one of a failure of the CUDA runtime, driver or libraries (cuDNN, cuBLAS, ...) or a
    device-side assert."""
    if isinstance(exc, DeviceError):
        return False  # already told
    accel = getattr(torch, "AcceleratorError", None)
    if isinstance(exc, torch.OutOfMemoryError) or (accel is not None and isinstance(exc, accel)):
        return True
    return isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in _CUDA_ERRORS)


def device_name(device: torch.device) -> str:
    """``cuda:0 (NVIDIA H100 80GB HBM3)``; just ``cuda:0`` where the name cannot be read."""
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
        except (RuntimeError, AssertionError, ValueError):
            pass
    return str(dev)


def device_failure(exc: BaseException, device: torch.device | str, what: str) -> DeviceError | None:
    """The :class:`DeviceError` telling that ``what`` failed on ``device`` because of ``exc``,
    or None when ``exc`` is no failure of an accelerator (:func:`is_device_failure`) or
    ``device`` is the CPU (whose errors keep their own meaning)."""
    dev = torch.device(device)
    if dev.type == "cpu" or not is_device_failure(exc):
        return None
    where = device_name(dev)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, torch.OutOfMemoryError):
        todo = (
            "the GPU ran out of memory. What to do: train on the CPU (--device cpu, or train.device: cpu in the config); "
            "or ask for less at once: fewer clients per round (clients_per_round: the stacked path holds every client "
            "of a round on the GPU together), a smaller batch_size or model; or free the GPU of other processes (nvidia-smi)"
        )
    else:
        cuda = torch.version.cuda or "none (a CPU-only build)"
        todo = (
            "this is an error of the device, not of a client. What to do: check the GPU and its driver (nvidia-smi) and "
            f"that this PyTorch ({torch.__version__}, CUDA {cuda}) suits them; rerun with CUDA_LAUNCH_BLOCKING=1 to see "
            "the operation that failed; or train on the CPU (--device cpu, or train.device: cpu)"
        )
    return DeviceError(f"{what} on {where} failed ({type(exc).__name__}: {first}): {todo}")


@contextmanager
def on_device(device: torch.device | str, what: str) -> Iterator[None]:
    """Run the block; a failure of the accelerator inside it is raised again as a
    :class:`DeviceError` (:func:`device_failure`) chained to the original, other exceptions
    pass unchanged. Nothing is done on the CPU."""
    try:
        yield
    except Exception as e:
        err = device_failure(e, device, what)
        if err is None:
            raise
        raise err from e
