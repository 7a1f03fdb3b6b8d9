"""GPU use and memory through NVML (ctypes on libnvidia-ml), for Prometheus. On a machine with
no NVIDIA driver the collector reports nothing: no error, no zero that reads like an idle GPU."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector


class _Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def load_nvml() -> Any | None:
    """NVML, initialised; None where there is no NVIDIA driver."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    return nvml


class GpuCollector(Collector):
    def __init__(self) -> None:
        self._nvml = load_nvml()

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self._nvml is None:
            return
        used = GaugeMetricFamily(
            "durable_rag_gpu_memory_used_ratio", "GPU memory in use / total.", labels=["gpu"]
        )
        busy = GaugeMetricFamily(
            "durable_rag_gpu_utilization_ratio",
            "Fraction of the last sample period a kernel ran on the GPU.",
            labels=["gpu"],
        )
        count = ctypes.c_uint()
        if self._nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if self._nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                continue
            memory, rates = _Memory(), _Utilization()
            if self._nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0:
                used.add_metric([str(index)], memory.used / max(memory.total, 1))
            if self._nvml.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) == 0:
                busy.add_metric([str(index)], rates.gpu / 100)
        yield used
        yield busy


_registered: GpuCollector | None = None


def register_gpu_metrics() -> GpuCollector:
    """Once per process (workers that may hold a GPU)."""
    global _registered
    if _registered is None:
        _registered = GpuCollector()
        REGISTRY.register(_registered)
    return _registered
