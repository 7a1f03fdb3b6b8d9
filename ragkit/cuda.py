"""The CUDA check a GPU worker makes before it loads a model (R30).

Three versions must agree: the CUDA version the NVIDIA driver supports (NVML), the CUDA runtime
torch was built with and ships (`torch.version.cuda`), and a GPU must be visible. A mismatch found
at start is one clear message; found later it is a crash deep inside a kernel launch, or a model
that silently runs on the CPU.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ragkit.gpu import load_nvml


class CudaMismatch(RuntimeError):
    """The machine cannot run what this worker is configured to run on a GPU."""


@dataclass(frozen=True)
class CudaFacts:
    """What the machine and the installed torch say. None: not there at all."""

    driver_cuda: tuple[int, int] | None  # the newest CUDA the driver supports
    torch_cuda: tuple[int, int] | None  # the CUDA runtime torch was built with (None: CPU build)
    torch_version: str
    visible_gpus: int  # what torch can use (CUDA_VISIBLE_DEVICES applied)

    def describe(self) -> str:
        return (
            f"driver CUDA {_version(self.driver_cuda)}, torch {self.torch_version} built for "
            f"CUDA {_version(self.torch_cuda)}, {self.visible_gpus} GPU(s) visible"
        )


def _version(version: tuple[int, int] | None) -> str:
    return "none" if version is None else f"{version[0]}.{version[1]}"


def _parse(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    parts = [*text.split("."), "0"]  # "12" reads as 12.0
    return int(parts[0]), int(parts[1])


def probe() -> CudaFacts:
    """The real machine's facts: NVML for the driver, torch for its build and the devices."""
    import torch

    driver: tuple[int, int] | None = None
    nvml = load_nvml()
    if nvml is not None:
        version = ctypes.c_int()
        if nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(version)) == 0:
            driver = (version.value // 1000, (version.value % 1000) // 10)
    visible = torch.cuda.device_count() if torch.version.cuda else 0
    return CudaFacts(driver, _parse(torch.version.cuda), str(torch.__version__), visible)


def check(facts: CudaFacts, what: str) -> None:
    """CudaMismatch, naming the fix, unless `what` (the component configured for a GPU) can run
    on this machine as installed."""
    where = f"{what} is configured for a GPU, but"
    if facts.torch_cuda is None:
        raise CudaMismatch(
            f"{where} torch {facts.torch_version} is a CPU build ({facts.describe()}). Install "
            "the gpu image or extra (`pip install -c requirements.lock '.[gpu]'`), or configure "
            "the CPU."
        )
    if facts.driver_cuda is None:
        raise CudaMismatch(
            f"{where} no NVIDIA driver answers ({facts.describe()}). Is the GPU passed to the "
            "container (compose `deploy.resources.reservations.devices`, the NVIDIA container "
            "toolkit)?"
        )
    if facts.driver_cuda < facts.torch_cuda:
        raise CudaMismatch(
            f"{where} the driver supports CUDA up to {_version(facts.driver_cuda)} while torch "
            f"{facts.torch_version} needs CUDA {_version(facts.torch_cuda)} ({facts.describe()}). "
            "Upgrade the NVIDIA driver, or install a torch built for the driver's CUDA."
        )
    if facts.visible_gpus == 0:
        raise CudaMismatch(
            f"{where} no GPU is visible to torch ({facts.describe()}). Check "
            "CUDA_VISIBLE_DEVICES and that the device is passed to the container."
        )
