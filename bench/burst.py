"""Row 5 of bench/serving.py: a burst past capacity through the OpenAI endpoint, on the embedded
stack as processes, at the default admission settings (ragkit/admission.py).

    .venv/bin/python bench/burst.py [--requests 300] [--max-tokens 8] [--sides lifted,bounded,two,floor]
    .venv/bin/python bench/burst.py --calibrate      # measure the costs admission counts

Sides, one after the other on one stack (each with the gateways it names, the others stopped):

- `lifted`: one gateway with the latency bound lifted (a target of an hour): what a gateway that
  refuses nothing does with the burst. This is main's behaviour before issue 39, where short
  answers never reached the token bound.
- `bounded`: one gateway at the defaults.
- `two`: two gateways at the defaults, the burst split between them as a load balancer would;
  their backlog gauges are polled, so the row shows the two together hold one bound.
- `floor`: no gateway; a bare ASGI app on uvicorn, on the serving CPUs as the gateway runs, that
  answers every request 429 at once. Its `to 429` is what any Python front takes to refuse the
  same burst on this machine, with this client: the floor under the gateway's.

Each side sends `requests` streamed asks at once, waits for every run to end, then
`requests` plain asks at once. Per request: its status; for admitted ones the time to the first
token and the total, at the client; for refusals the time to the 429, from the request's last
byte out; and where the time before the response began went: before the gateway saw the request
(accept and parse, on a busy event loop), then the phases its Server-Timing header names (body:
until the whole body was read; admit: the door's decision; turn: the start window; start: the
key check and the workflow's start).

Calibration sends streamed bursts with the bound lifted and no access timeout: a warm-up (not
counted), short questions with 8-token answers, long questions (~620 tokens more) with 8-token
answers, short questions with 64-token answers, and short-8 again. The slope of the completion
times (seconds per request, once the pipeline is full) of each, against the prompt and answer
tokens, gives the three costs; it prints them as settings. Every question starts with a few
unique characters, so the engine's prefix cache serves the retrieved passages that repeat (they
come first in the prompt) but never a question, as with real users' questions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.burst_client import Sent, ask  # noqa: E402
from bench.load import QUESTIONS, MixedLoad  # noqa: E402
from bench.scaleout import api_key  # noqa: E402
from bench.stack import ProcessStack, quiet_runtime, started  # noqa: E402
from durable_rag.stack.process import free_port, port_in_use  # noqa: E402
from ragkit.cpus import spawn_on  # noqa: E402
from ragkit.retrieval import estimate_tokens  # noqa: E402
from ragkit.temporal import connect  # noqa: E402

TENANT = "burst"
LIFTED = {"llm_p99_target_seconds": 3_600}
# The embedded stack's defaults where bench/stack.py narrows them for its faults.
STACK = {"llm_max_num_seqs": 8, "llm_max_concurrent_generations": 64}
LONG_QUESTION = (
    " ".join(["Explain, with every detail the passages give,"] * 40) + " " + QUESTIONS[0]
)


def session(connections: int, total: float) -> aiohttp.ClientSession:
    """The backlog poller's client (the burst's and the late asks': bench/burst_client.py)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, force_close=True),
        timeout=aiohttp.ClientTimeout(total=total, sock_connect=60),
    )


def pct(values: list[float], q: float) -> float:
    values = sorted(v for v in values if not math.isnan(v))
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def peak_overlap(sent: list[Sent]) -> int:
    """The most admitted requests in flight at once, at the client."""
    edges = sorted([(s.began, 1) for s in sent] + [(s.ended, -1) for s in sent])
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def summary(label: str, sent: list[Sent], timeout: float, target: float) -> dict[str, Any]:
    admitted = [s for s in sent if s.status == 200]
    refused = [s for s in sent if s.status == 429]
    failed = [s for s in sent if s not in admitted and s not in refused]
    statuses = sorted({str(s.status) for s in failed})
    timed_out = [s for s in admitted if s.error_event == 504]
    ttft = [s.first_token for s in admitted if s.streamed]
    totals = [s.total for s in admitted]
    # Where the time before the response began went, for admitted streams (ms): a plain
    # request's response begins only with its answer. `unseen`: before the gateway saw it.
    begun = [s for s in admitted if s.timing and s.streamed]
    before = {
        "unseen": [(s.headers - s.sent) * 1000 - sum(s.timing.values()) for s in begun],
        **{p: [s.timing.get(p, 0.0) for s in begun] for p in ("body", "admit", "turn", "settle", "start")},
    }  # fmt: skip
    streamed = bool(sent and sent[0].streamed)
    to_429 = [(s.total - s.sent) * 1000 for s in refused]
    row = {
        "side": label,
        "kind": "streamed" if streamed else "plain",
        "sent": len(sent),
        "admitted": len(admitted),
        "refused_429": len(refused),
        "5xx_or_error": len(failed) + len([s for s in admitted if s.error_event >= 500]),
        "failed_as": ",".join(statuses[:4]),
        "timeouts": len(timed_out),
        "ttft_p50_s": pct(ttft, 0.5),
        "ttft_p99_s": pct(ttft, 0.99),
        "ttft_max_s": pct(ttft, 1.0),
        "total_p50_s": pct(totals, 0.5),
        "total_p99_s": pct(totals, 0.99),
        "total_max_s": pct(totals, 1.0),
        # From the request's last byte out to the 429's response, at the client.
        "to_429_p50_ms": pct(to_429, 0.5),
        "to_429_max_ms": pct(to_429, 1.0),
        # Before that, the client's own: from its coroutine's start to its last byte out.
        "client_send_p50_ms": pct([s.sent * 1000 for s in sent], 0.5),
        "client_send_max_ms": pct([s.sent * 1000 for s in sent], 1.0),
        # A refusal's own time in the gateway (Server-Timing): from its arrival (its headers) to
        # its whole body, and from there to the door's decision.
        "429_body_p50_ms": pct([s.timing.get("body", math.nan) for s in refused], 0.5),
        "429_decided_p50_ms": pct([s.timing.get("admit", math.nan) for s in refused], 0.5),
        "429_decided_max_ms": pct([s.timing.get("admit", math.nan) for s in refused], 1.0),
        "peak_admitted": peak_overlap(admitted),
        "retry_after": sorted({s.retry_after for s in refused}, key=lambda r: int(r or 0))[:6],
    }
    for phase, values in before.items():
        row[f"{phase}_p50_ms"], row[f"{phase}_max_ms"] = pct(values, 0.5), pct(values, 1.0)
    row["met"] = bool(
        not failed
        and all(s.total <= timeout + 1 for s in admitted)  # a second's grace for the last bytes
        and (not streamed or all(t <= target for t in ttft))
        and all(t <= 100 for t in to_429)
        and len(admitted) >= STACK["llm_max_num_seqs"]
    )
    return row


LATE_AFTER_SECONDS = 10.0  # the burst's arrival is over; its admitted work is running
LATE_REQUESTS = 20


# The burst's arrival and its refusals: what the hypervisor took from this VM then is in them.
ARRIVAL_SECONDS = 0.5


def _steal_jiffies() -> list[int]:
    """Per CPU, the time the hypervisor ran something else while this VM's CPU was runnable."""
    lines = Path("/proc/stat").read_text().splitlines()
    return [int(line.split()[8]) for line in lines if re.match(r"cpu\d", line)]


async def steal_ms(seconds: float) -> list[int]:
    """Each CPU's stolen time over the next `seconds` (ms, in steps of the kernel's 10 ms tick)."""
    before = _steal_jiffies()
    await asyncio.sleep(seconds)
    return [(b - a) * 10 for a, b in zip(before, _steal_jiffies(), strict=True)]


async def late_refusals(url: str, key: str, longest: int) -> dict[str, Any]:
    """The common overload: a request that arrives alone while the admitted work runs.
    `LATE_REQUESTS` streamed asks, one after the other, from `LATE_AFTER_SECONDS` into the burst,
    each for the longest answer (44 s on its own here), so it is refused while more than ~16 s of
    work is held: an 8-token one is admitted whenever an earlier request ends, as it should be.
    One admitted anyway leaves after 2 s (its run is cancelled). Their time to 429 at the client,
    sent by the burst's own client (bench/burst_client.py): through aiohttp (its resolver thread,
    its own parsing) a few took 0.13-0.85 s of which the gateway's Server-Timing held 0.5 ms."""
    await asyncio.sleep(LATE_AFTER_SECONDS)
    refused: list[Sent] = []
    for _ in range(LATE_REQUESTS):
        sent = await ask(url, key, QUESTIONS[0], longest, True, 0, total=2.0)
        if sent.status == 429:
            refused.append(sent)
        await asyncio.sleep(0.05)
    times = [s.headers * 1000 for s in refused]  # from the connect to the response's head
    slowest = max(refused, key=lambda s: s.headers, default=None)
    return {
        "late_429": len(refused),
        "late_429_p50_ms": pct(times, 0.5),
        "late_429_max_ms": pct(times, 1.0),
        # Of the slowest, the time the gateway's Server-Timing accounts for (arrival to the
        # decision): the rest was before it saw the request, or the client's own.
        "late_429_max_gateway_ms": sum(slowest.timing.values()) if slowest else math.nan,
    }


async def quiet(client: Any, within: float = 600) -> None:
    """Until no answer workflow runs: the next burst starts on an idle stack."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        running = [w async for w in client.list_workflows("ExecutionStatus='Running'", limit=5)]
        if not [w for w in running if w.id.startswith("answer-")]:
            return
        await asyncio.sleep(1)
    raise RuntimeError("answer runs still running long after the burst")


class Backlogs:
    """Polls every gateway's backlog gauge; the most the gateways held together at once. A
    scrape takes the gateway's event loop for ~10 ms (its process collector reads /proc), so
    the first comes after the burst's arrival (the backlog peaks once the admitted are in), and
    the next every POLL_SECONDS."""

    POLL_SECONDS = 0.5

    def __init__(self, urls: list[str]) -> None:
        self.urls, self.peak = urls, 0.0

    async def poll(self, http: aiohttp.ClientSession) -> None:
        await asyncio.sleep(ARRIVAL_SECONDS)
        while True:
            total = 0.0
            for url in self.urls:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(f"{url}/metrics") as response:
                        text = await response.text()
                    total += sum(
                        float(v)
                        for v in re.findall(
                            r"^durable_rag_gateway_backlog_seconds\{[^}]*\} ([0-9.e+-]+)$",
                            text,
                            re.M,
                        )
                    )
            self.peak = max(self.peak, total)
            await asyncio.sleep(self.POLL_SECONDS)


async def burst(urls: list[str], key: str, requests: int, tokens: int, streamed: bool,
                total: float, question: str | None = None) -> list[Sent]:  # fmt: skip
    return list(
        await asyncio.gather(
            *(
                ask(
                    urls[n % len(urls)],
                    key,
                    question or QUESTIONS[n % len(QUESTIONS)],
                    tokens,
                    streamed,
                    n % len(urls),
                    total,
                )
                for n in range(requests)
            )
        )
    )


# The floor side's server: nothing of ours, only uvicorn (uvloop, httptools) as the gateway runs.
FLOOR_APP = """
import sys, uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 429,
                "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")]})
    await send({"type": "http.response.body", "body": b'{"detail": "overloaded"}'})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_config=None, access_log=False,
            lifespan="off")
"""


@contextlib.contextmanager
def floor_server(stack: ProcessStack) -> Iterator[str]:
    """FLOOR_APP on a free port, on the serving CPUs; its base URL once it accepts."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", FLOOR_APP, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=spawn_on(stack.serving),
    )
    try:
        deadline = time.monotonic() + 30
        while not port_in_use(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the floor's server did not start (exit {process.poll()})")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def start_gateways(stack: ProcessStack, count: int, **overrides: Any) -> list[str]:
    for n in list(stack.gateway_ports):
        stack.gateway(n).stop(timeout=15)
        del stack.gateway_ports[n]
    return [stack.start_gateway(n + 1, **overrides) for n in range(count)]


async def prepared() -> tuple[ProcessStack, Any, str]:
    stack = await started("burst", **STACK)
    client = await connect(stack.settings, quiet_runtime())
    load = MixedLoad(client, stack.settings, TENANT, stack.work / "corpus")
    await load.seed()
    return stack, client, api_key(stack, TENANT)


async def run_sides(sides: list[str], requests: int, tokens: int) -> list[dict[str, Any]]:
    stack, client, key = await prepared()
    settings = stack.settings
    timeout, target = settings.access_timeout_seconds, settings.llm.p99_target_seconds
    rows: list[dict[str, Any]] = []
    floor = contextlib.ExitStack()
    try:
        if "probe" in sides:
            probe = await asyncio.to_thread(shared_count_probe, stack, requests)
            print(json.dumps(probe), flush=True)
            rows.append({"side": "probe", **probe})
        async with session(2 * requests + 20, 600) as http:
            for side in [s for s in sides if s != "probe"]:
                count = {"two": 2, "floor": 0}.get(side, 1)
                urls = await asyncio.to_thread(
                    start_gateways, stack, count, **(LIFTED if side == "lifted" else {})
                )
                if side == "floor":
                    urls = [floor.enter_context(floor_server(stack))]
                await asyncio.sleep(2 * settings.gateway.heartbeat_seconds)  # they see each other
                for streamed in (True, False):
                    backlogs = Backlogs(urls)
                    poller = asyncio.create_task(backlogs.poll(http))
                    print(f"side {side}: {requests} {'streamed' if streamed else 'plain'} ...",
                          flush=True)  # fmt: skip
                    began = time.monotonic()
                    later = None
                    if side not in ("lifted", "floor"):  # nothing is refused on arrival there
                        later = asyncio.create_task(
                            late_refusals(urls[0], key, settings.llm.max_answer_tokens)
                        )
                    stolen = asyncio.create_task(steal_ms(ARRIVAL_SECONDS))
                    sent = await burst(urls, key, requests, tokens, streamed, 600)
                    poller.cancel()
                    row = summary(side, sent, timeout, target)
                    if later is not None:
                        row.update(await later)
                    row["backlog_peak_s"] = round(backlogs.peak, 1)
                    row["steal_ms"] = await stolen
                    row["seconds"] = round(time.monotonic() - began, 1)
                    rows.append(row)
                    print(json.dumps(row, default=str), flush=True)
                    await quiet(client)
    finally:
        floor.close()
        await asyncio.to_thread(stack.close)
    return rows


def shared_count_probe(stack: ProcessStack, requests: int) -> dict[str, float]:
    """The alternative to shares, measured: one count in Postgres that every gateway admits
    against (a transaction that locks the model's count, sums the live work and adds its own),
    for a burst of `requests` admissions at once from a gateway's worker threads."""
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import create_engine, text

    engine = create_engine(stack.settings.postgres.sqlalchemy_url, pool_size=8, max_overflow=0)
    with engine.begin() as db:
        db.execute(text("CREATE TABLE IF NOT EXISTS probe_admitted (id uuid PRIMARY KEY, "
                        "model text, work float8, expires timestamptz)"))  # fmt: skip

    def admit() -> float:
        began = time.monotonic()
        with engine.begin() as db:
            db.execute(text("SELECT pg_advisory_xact_lock(hashtext('m'))"))
            held = db.scalar(text("SELECT coalesce(sum(work), 0) FROM probe_admitted "
                                  "WHERE model = 'm' AND expires > now()"))  # fmt: skip
            if float(held or 0) + 0.5 <= 60:
                db.execute(text("INSERT INTO probe_admitted VALUES (gen_random_uuid(), 'm', "
                                "0.3, now() + interval '90 seconds')"))  # fmt: skip
        return (time.monotonic() - began) * 1000

    began = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        waits = list(pool.map(lambda _: admit(), range(requests)))
    makespan = (time.monotonic() - began) * 1000
    with engine.begin() as db:
        db.execute(text("DROP TABLE probe_admitted"))
    engine.dispose()
    local = local_admit_probe(requests)
    return {"shared_admit_p50_ms": pct(waits, 0.5), "shared_admit_max_ms": pct(waits, 1.0),
            "shared_burst_ms": makespan, "local_admit_max_ms": local}  # fmt: skip


def local_admit_probe(requests: int) -> float:
    """The same burst against this process's count (ragkit/admission.py): the slowest, in ms."""
    from ragkit.admission import Admission, Limits, Overloaded
    from ragkit.settings import Settings

    admission, slowest = Admission(Limits.from_settings(Settings().llm)), 0.0
    for _ in range(requests):
        began = time.perf_counter()
        with contextlib.suppress(Overloaded):
            admission.admit("m", 8, 12)
        slowest = max(slowest, time.perf_counter() - began)
    return slowest * 1000


def slope(sent: list[Sent]) -> float:
    """Seconds per request once the pipeline is full: the least-squares slope of the sorted
    completion times over the last three quarters of the burst."""
    done = sorted(s.total for s in sent if s.status == 200)
    tail = done[len(done) // 4 :]
    xs = list(range(len(tail)))
    return statistics.linear_regression(xs, tail).slope


async def calibrate(requests: int) -> dict[str, float]:
    stack, client, key = await prepared()
    seqs = stack.settings.llm.max_num_seqs
    try:
        # Every request must run to its end: no bound, and no access timeout either.
        unbounded = LIFTED | {"gateway_request_timeout_seconds": 3_600}
        urls = await asyncio.to_thread(start_gateways, stack, 1, **unbounded)
        found: dict[str, list[tuple[float, float]]] = {}
        # The first burst after a start warms caches, the engine and the workers' pools: not
        # counted. Short-8 runs first and last, so drift over the run shows, and averages.
        for name, question, tokens in (
            ("warm-up", None, 8),
            ("short-8", None, 8),
            ("long-8", LONG_QUESTION, 8),
            ("short-64", None, 64),
            ("short-8", None, 8),
        ):
            print(f"calibration burst {name} ...", flush=True)
            count = requests // 2 if name == "warm-up" else requests
            sent = await burst(urls, key, count, tokens, True, 900, question)
            bad = [s.status for s in sent if s.status != 200 or s.error_event]
            if bad:
                raise RuntimeError(f"{name}: {len(bad)} requests failed: {bad[:5]}")
            prompt = statistics.mean(s.prompt_tokens for s in sent)
            found.setdefault(name, []).append((slope(sent), prompt))
            print(f"  {slope(sent):.3f} s per request; prompt {prompt:.0f} tokens", flush=True)
            await quiet(client)
    finally:
        await asyncio.to_thread(stack.close)
    short = statistics.mean(x for x, _ in found["short-8"])
    p_short = statistics.mean(p for _, p in found["short-8"])
    (long, p_long), (more, _) = found["long-8"][0], found["short-64"][0]
    # Each question starts unique (`ask`), so the engine's prefix cache serves the passages
    # that repeat and none of the question: the long one's extra tokens are all prefilled.
    prefill = max(0.0, (long - short) / (p_long - p_short))
    per_answer_token = max(0.0, (more - short) / 56)  # work: a step serves `seqs` sequences
    own = statistics.mean(estimate_tokens(f"({'u' * 6}) {q}") for q in QUESTIONS)  # as sent
    request = max(0.0, short - own * prefill - 8 * per_answer_token)
    return {
        "llm_request_seconds": round(request, 3),
        "llm_prefill_seconds_per_token": round(prefill, 6),
        "llm_per_token_seconds": round(per_answer_token * seqs, 4),
    }


def print_rows(rows: list[dict[str, Any]]) -> None:
    for probe in [r for r in rows if r["side"] == "probe"]:
        print("count shared in Postgres, a burst of admissions: " + ", ".join(
            f"{k} {v:.1f}" for k, v in probe.items() if k != "side"))  # fmt: skip
    rows = [r for r in rows if r["side"] != "probe"]
    if not rows:
        return
    keys = list(dict.fromkeys(k for row in rows for k in row))  # `lifted` has no late asks
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        values = [row.get(k, "") for k in keys]
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in values]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per burst")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument(
        "--sides",
        default="lifted,bounded,two,floor",
        help="lifted, bounded, two, floor; probe: time a count shared in Postgres instead",
    )
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    began = time.monotonic()
    if args.calibrate:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            found = runner.run(calibrate(min(args.requests, 120)))
        print(
            "\nmeasured costs (set as the defaults in ragkit/settings/serving.py, or in the env):"
        )
        for name, value in found.items():
            print(f"  DURABLE_RAG_{name.upper()}={value}")
        out: Any = found
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            rows = runner.run(run_sides(args.sides.split(","), args.requests, args.max_tokens))
        print()
        print_rows(rows)
        out = rows
    print(f"\n({time.monotonic() - began:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
