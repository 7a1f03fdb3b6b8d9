"""The time-skipping test server, for retry and timeout behaviour without waiting it out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

TEST_SERVER = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "temporal-test-server"


async def start_time_skipping() -> WorkflowEnvironment:
    return await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=str(TEST_SERVER)
    )


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_time_skipping()
    yield environment
    await environment.shutdown()
