"""GPU metrics: real NVML where a driver exists, nothing at all where it does not."""

from __future__ import annotations

from ragkit.gpu import GpuCollector


def test_gpu_metrics_are_ratios_or_absent() -> None:
    collector = GpuCollector()
    families = list(collector.collect())
    if not collector.available:
        assert families == []  # no driver: no series, not a zero that reads like an idle GPU
        return
    names = {f.name for f in families}
    assert names == {"durable_rag_gpu_memory_used_ratio", "durable_rag_gpu_utilization_ratio"}
    for family in families:
        for sample in family.samples:
            assert 0.0 <= sample.value <= 1.0, sample
