"""/metrics encodes off the event loop: a scrape never holds the requests in flight."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
from fastapi import FastAPI
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.routers import admin


class WhereCollected(Collector):
    def __init__(self) -> None:
        self.threads: list[int] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.threads.append(threading.get_ident())
        yield GaugeMetricFamily("test_where_collected", "Which thread collected.", value=1)


async def test_a_scrape_is_encoded_on_a_worker_thread_not_the_event_loop() -> None:
    app = FastAPI()
    app.include_router(admin.router)
    where = WhereCollected()
    REGISTRY.register(where)
    where.threads.clear()  # registering collects once, to learn the names
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
            plain = await http.get("/metrics")
            open_metrics = await http.get(
                "/metrics", headers={"Accept": "application/openmetrics-text"}
            )
    finally:
        REGISTRY.unregister(where)
    assert plain.status_code == 200 and "test_where_collected 1.0" in plain.text
    assert plain.headers["content-type"].startswith("text/plain")
    assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
    assert open_metrics.text.rstrip().endswith("# EOF")
    assert len(where.threads) == 2
    assert threading.get_ident() not in where.threads
