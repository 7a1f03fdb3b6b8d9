"""The Temporal Web UI shows a sealed answer decoded (issue 17).

A Temporal dev server of the test's own, with the Web UI, wired to the gateway's codec endpoint as
`durable-rag up` wires it (`--ui-codec-endpoint` at `/codec/<token>`), and the gateway on a real
port. With payload encryption on, an answer runs whose question carries a marker; the server's
history holds only ciphertext, so when headless Chromium opens the run's page and the marker shows
in it, it came through the codec endpoint, called by the page's own JavaScript.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as websocket

from durable_rag.stack import EmbeddedStack
from durable_rag.stack.process import free_port, tail
from durable_rag.stack.temporal import TemporalDevServer
from gateway.app import create_app
from gateway.server import serving_here
from ragkit.codec import ui_token
from ragkit.embedding import Embedder
from ragkit.llm.engine import VllmEngine
from ragkit.settings import Settings
from ragkit.store import keys
from ragkit.temporal import connect
from tests.conftest import Database, make_settings
from tests.gateway.test_app import bearer, gateway
from tests.gateway.test_codec import key_entry, sealed_client
from tests.workflows.test_answer import ingest_sample

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

ADMIN = f"admin-{uuid.uuid4().hex}"
SECURITY: dict[str, Any] = {
    "security_payload_encryption": True,
    "security_payload_keys": key_entry("k1"),
    "security_admin_key": ADMIN,
}
# platform-notes.md: what Debian's Chromium needs to run headless here, and nothing that phones
# home (there is no internet to wait for).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--window-size=1400,1000",
    "--remote-debugging-port=0",  # Chromium picks the port and writes it to DevToolsActivePort
)
# The UI renders within ~2 s of the page load on an idle machine; the rest is slack for 2 busy
# cores.
DECODE_DEADLINE_S = 60


@pytest.fixture
def ui_stack(tmp_path: Path) -> Iterator[tuple[Settings, TemporalDevServer]]:
    """The embedded stack's Temporal dev server, Web UI on, on free ports."""
    ui_port = free_port()
    values: dict[str, Any] = {
        "profile": "embedded",
        "data_dir": tmp_path / "stack",
        "temporal_address": f"127.0.0.1:{free_port()}",
        "temporal_ui_port": ui_port,
        "temporal_ui_url": f"http://127.0.0.1:{ui_port}",
        "temporal_metrics_port": free_port(),
        "gateway_port": free_port(),
        **SECURITY,
    }
    settings = Settings(**values)
    # The stack's own wiring, not a copy of it: what `durable-rag up` would start.
    server = EmbeddedStack(settings).temporal
    assert server.ui_codec_endpoint == (
        f"http://127.0.0.1:{settings.gateway.port}/codec/{ui_token(ADMIN)}"
    )
    server.start()
    try:
        yield settings, server
    finally:
        server.stop()


class DevTools:
    """Just enough of the Chrome DevTools Protocol over one page's websocket."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.last_id = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.last_id += 1
        await self.socket.send(json.dumps({"id": self.last_id, "method": method, "params": params}))
        while True:  # events arrive in between (none are enabled, but be lenient)
            message = json.loads(await self.socket.recv())
            if message.get("id") == self.last_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    async def text(self) -> str:
        try:
            evaluated = await self.call(
                "Runtime.evaluate",
                expression="document.body ? document.body.innerText : ''",
                returnByValue=True,
            )
        except RuntimeError:  # asked while the page swapped its context (loading): ask again
            return ""
        return str(evaluated["result"].get("value", ""))

    async def screenshot(self, path: Path) -> Path:
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@asynccontextmanager
async def chromium_at(
    chromium: str, url: str, profile: Path
) -> AsyncIterator[tuple[DevTools, Path]]:
    """Headless Chromium on a fresh profile, opened at `url`: DevTools on its page, and its log."""
    log = profile.parent / "chromium.log"
    with log.open("w") as out:
        # Its own process group: the browser's zygote and renderers go with it.
        browser = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", url],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while len(lines := (active.read_text().split() if active.exists() else [])) < 2:
            assert browser.poll() is None, f"chromium exited ({browser.returncode}):\n{tail(log)}"
            assert time.monotonic() < deadline, f"chromium opened no DevTools port:\n{tail(log)}"
            await asyncio.sleep(0.05)
        # A browser still starting on a loaded 2-CPU runner can take past httpx's 5 s default to
        # answer its first DevTools request.
        async with httpx.AsyncClient(timeout=60) as http:
            targets = (await http.get(f"http://127.0.0.1:{lines[0]}/json/list")).json()
        page = next(t for t in targets if t["type"] == "page")
        async with websocket(page["webSocketDebuggerUrl"], max_size=None) as socket:
            yield DevTools(socket), log
    finally:
        os.killpg(browser.pid, signal.SIGTERM)
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait()


async def test_the_temporal_ui_shows_a_sealed_question_decoded_through_the_codec_endpoint(
    ui_stack: tuple[Settings, TemporalDevServer],
    module_database: Database,
    embedder: Embedder,
    engine: VllmEngine,
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
) -> None:
    chromium = shutil.which("chromium")
    # Before the slow part: a missing browser should not cost an ingest and an answer to learn.
    assert chromium, (
        "chromium is not installed: `make test` installs it (scripts/system-deps.sh; Debian "
        "package chromium)"
    )
    settings, server = ui_stack
    plain = await connect(make_settings(temporal_address=server.address))
    data_dir = await ingest_sample(plain, module_database, embedder, tmp_path_factory)
    marker = f"zebracorn-{uuid.uuid4().hex[:8]}"
    _, key = keys.create_key(module_database.sessions, "t")
    # The UI's origin, for the codec endpoint's CORS.
    security = {**SECURITY, "temporal_ui_url": settings.temporal.ui_url}
    sealed = sealed_client(plain, **security)
    async with gateway(sealed, module_database, embedder, engine, data_dir, **security) as (
        http,
        rag,
    ):
        asked = await http.post(
            "/v1/ask",
            json={
                "question": f"Who designed the UTF-8 encoding? ({marker})",
                "max_answer_tokens": 16,
                "top_k": 3,
            },
            headers=bearer(key),
        )
        assert asked.status_code == 200, asked.text
        workflow_id = asked.json()["trace_id"]
        # Nothing but the codec can show the marker: it is in no id, and the server's history,
        # which is all the UI reads from Temporal, holds it only sealed.
        assert marker not in workflow_id
        handle = plain.get_workflow_handle(workflow_id)
        history = b"".join(e.SerializeToString() for e in (await handle.fetch_history()).events)
        assert b"AnswerWorkflow" in history and marker.encode() not in history
        run_id = (await handle.describe()).run_id

        ui = settings.temporal.ui_url
        url = f"{ui}/namespaces/default/workflows/{workflow_id}/{run_id}/history"
        async with (
            serving_here(create_app(rag.settings, rag), settings.gateway.port),
            chromium_at(chromium, url, tmp_path / "chromium-profile") as (page, log),
        ):
            started = time.monotonic()
            text = ""
            while marker not in text and time.monotonic() - started < DECODE_DEADLINE_S:
                await asyncio.sleep(0.5)
                text = await page.text()
            # The question can show before the result beside it is laid out: a moment for the
            # screenshot to hold both.
            await asyncio.sleep(0.5)
            shot = await page.screenshot(tmp_path / "temporal-ui-decoded.png")
            if into := os.environ.get("DURABLE_RAG_SCREENSHOT_DIR"):
                Path(into).mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, Path(into) / shot.name)
            assert marker in text, (
                f"the UI did not show the decoded question within {DECODE_DEADLINE_S} s "
                f"(screenshot {shot}); the page said:\n{text[-2000:]}\nchromium:\n{tail(log)}"
            )
