"""One long-lived thread per loaded model, on which every call into torch runs.

Activities run on a worker's thread pool, whose threads come and go; the test suite starts a
worker (and so new threads) per test. In four runs of the suite on a clean clone, a process died
of a SIGSEGV at the same spot: the first read of torch's thread-local grad mode (`no_grad`
entering) on an activity thread that had never called torch. A model's calls already run one at a
time (each model holds a lock), so running them on one thread made at load costs no concurrency:
torch's thread-local state is set up once, at startup, and never on a pool thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def _first_touch() -> None:
    import torch

    torch.is_grad_enabled()  # sets up torch's thread-local state here, at load


class ModelThread:
    """Runs calls on its own thread, one at a time; the caller waits for the result."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._executor.submit(_first_touch).result()

    def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        return self._executor.submit(fn, *args, **kwargs).result()
