"""What the LLM worker hands its engine's processes through the environment (workers/llm.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import make_settings
from workers.llm import TCMALLOC, engine_environment


def test_a_cpu_engine_gets_tcmalloc_where_installed_and_a_gpu_one_nothing(tmp_path: Path) -> None:
    """With glibc's defaults the model runner's heap fragmented under a steady load (10-minute
    soaks: a slope of +2,573 MB an hour, against +709 with tcmalloc, +768 with a fixed mmap
    threshold)."""
    library = tmp_path / "libtcmalloc_minimal.so.4"
    library.touch()
    cpu = engine_environment(make_settings(llm_cpu_kvcache_gib=3), tcmalloc=library)
    assert cpu == {"VLLM_CPU_KVCACHE_SPACE": "3", "LD_PRELOAD": str(library)}

    # Not installed, or glibc asked for: glibc with a fixed threshold; 0 leaves glibc's own.
    missing = engine_environment(make_settings(), tcmalloc=tmp_path / "none.so")
    assert missing["MALLOC_MMAP_THRESHOLD_"] == "131072" and "LD_PRELOAD" not in missing
    glibc = engine_environment(make_settings(llm_cpu_allocator="glibc"), tcmalloc=library)
    assert glibc["MALLOC_MMAP_THRESHOLD_"] == "131072" and "LD_PRELOAD" not in glibc
    off = make_settings(llm_cpu_allocator="glibc", llm_cpu_malloc_mmap_threshold_bytes=0)
    assert engine_environment(off, tcmalloc=library) == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    gpu = engine_environment(make_settings(llm_device="cuda"), tcmalloc=library)
    assert gpu == {"VLLM_CPU_KVCACHE_SPACE": "2"}


def test_the_allocator_the_worker_preloads_is_debians_tcmalloc() -> None:
    """scripts/system-deps.sh installs the package this path belongs to."""
    assert TCMALLOC.name == "libtcmalloc_minimal.so.4"
    assert (
        "libtcmalloc-minimal4" in (Path(__file__).parents[2] / "scripts/system-deps.sh").read_text()
    )
