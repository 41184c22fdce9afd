"""The streaming client: send the requests on schedule, measure each one, never stop at an error.

Per request: ``POST /v1/completions`` with a token-id prompt, ``stream`` with ``include_usage``,
an ``X-Request-Id`` header (and with ``session_headers`` the trace's session and user as
``X-Session-ID`` / ``X-User-ID``, the keys vllm-router's session-aware policies read),
``ignore_eos`` and ``max_tokens`` (so the output length is the trace's).  The clock starts just
before the POST; TTFT is the first streamed chunk that carries ``choices`` (even with empty text),
inter-token latencies are the gaps between later chunks with choices, E2E ends at ``[DONE]`` (or the
end of the stream).  The usage chunk gives ``prompt_tokens``, ``completion_tokens`` and
``prompt_tokens_details.cached_tokens``.

A failure (connection refused, HTTP error, timeout, a stream cut short) is recorded on the request
as ``error = "<kind>: <detail>"`` and the run goes on.  Ctrl-C (SIGINT) stops sending, cancels the
requests in flight (recorded as ``interrupted``) and returns what was measured.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import aiohttp

from replay.results import RequestResult
from replay.timing import Timing
from replay.workload import RequestSpec

logger = logging.getLogger(__name__)


@dataclass
class ClientConfig:
    endpoint: str
    model: str
    request_timeout_s: float = 600.0
    cache_salt: str | None = None
    temperature: float = 0.0
    #: send the trace's session id and user id as X-Session-ID / X-User-ID (when known)
    session_headers: bool = False


def request_headers(cfg: ClientConfig, res: RequestResult, spec: RequestSpec) -> dict[str, str]:
    """The request's headers: its id, and with ``session_headers`` its session and user."""
    h = {"X-Request-Id": f"replay-{res.seq}-{res.index}"}
    if cfg.session_headers:
        if spec.session >= 0:
            h["X-Session-ID"] = str(spec.session)
        if spec.user > 0:
            h["X-User-ID"] = str(spec.user)
    return h


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, total: int, enabled: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.errors = 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._last = 0.0

    def update(self, ok: bool) -> None:
        self.done += 1
        self.errors += 0 if ok else 1
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done == self.total):
            self._last = now
            width = 30
            filled = int(width * self.done / max(1, self.total))
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}"
                             f" errors {self.errors}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def request_body(cfg: ClientConfig, prompt: list[int], max_tokens: int) -> dict:
    body = {
        "model": cfg.model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": cfg.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if cfg.cache_salt:
        body["cache_salt"] = cfg.cache_salt
    return body


async def send_one(session: "aiohttp.ClientSession", cfg: ClientConfig, res: RequestResult,
                   prompt: list[int], t0: float, headers: dict[str, str] | None = None) -> None:
    """Send one request and fill ``res`` in place; never raises (except cancellation)."""
    import aiohttp

    url = cfg.endpoint.rstrip("/") + "/v1/completions"
    body = request_body(cfg, prompt, res.max_tokens)
    st = time.perf_counter()
    res.sent_s = st - t0
    last = None
    try:
        timeout = aiohttp.ClientTimeout(total=cfg.request_timeout_s)
        if headers is None:
            headers = {"X-Request-Id": f"replay-{res.seq}-{res.index}"}
        async with session.post(url, json=body, timeout=timeout, headers=headers) as resp:
            res.status = resp.status
            if resp.status != 200:
                text = (await resp.text())[:300].replace("\n", " ")
                res.error = f"http {resp.status}: {text}"
                return
            res.reached_engine = True
            done = False
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                chunk = json.loads(data)
                if "error" in chunk and not chunk.get("choices"):
                    err = chunk["error"]
                    res.error = f"stream: {err.get('message', err) if isinstance(err, dict) else err}"
                    return
                if chunk.get("choices"):
                    if res.ttft_s is None:
                        res.ttft_s = now - st
                        res.first_token_s = now - t0
                    elif last is not None:
                        res.itl_s.append(now - last)
                    last = now
                usage = chunk.get("usage")
                if usage:
                    res.prompt_tokens_reported = usage.get("prompt_tokens")
                    res.output_tokens = usage.get("completion_tokens")
                    details = usage.get("prompt_tokens_details") or {}
                    if details.get("cached_tokens") is not None:
                        res.cached_tokens = int(details["cached_tokens"])
            end = time.perf_counter()
            res.end_s = end - t0
            res.e2e_s = end - st
            if not done:
                res.error = "stream: ended without [DONE]"
            elif res.ttft_s is None:
                res.error = "stream: no tokens"
    except asyncio.TimeoutError:
        res.error = f"timeout: no complete answer within {cfg.request_timeout_s:g} s"
    except aiohttp.ClientConnectorError as exc:
        res.error = f"connect: {exc}"
    except (aiohttp.ClientError, ConnectionError, OSError) as exc:
        res.error = f"connection: {type(exc).__name__}: {exc}"
    except (ValueError, KeyError) as exc:
        res.error = f"protocol: {exc}"
    finally:
        if res.end_s is None:
            res.end_s = time.perf_counter() - t0


async def run_requests(cfg: ClientConfig, specs: list[RequestSpec], planned: list[float],
                       timing: Timing, make_prompt: Callable[[RequestSpec], list[int]],
                       progress: Progress | None = None,
                       on_result: Callable[[RequestResult], None] | None = None,
                       ) -> tuple[list[RequestResult], bool]:
    """Send ``specs`` at ``planned`` times; return ``(results in finishing order, interrupted)``."""
    import aiohttp

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = False
    try:
        loop.add_signal_handler(signal.SIGINT, stop.set)
        installed = True
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        pass
    sem = asyncio.Semaphore(timing.concurrency) if timing.concurrency else None
    results: list[RequestResult] = []
    tasks: set[asyncio.Task] = set()
    inflight: dict[asyncio.Task, RequestResult] = {}
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    t0 = time.perf_counter()

    async def one(spec: RequestSpec, res: RequestResult) -> None:
        try:
            prompt = make_prompt(spec)
            await send_one(session, cfg, res, prompt, t0, request_headers(cfg, res, spec))
        finally:
            if sem is not None:
                sem.release()
        results.append(res)
        if progress:
            progress.update(res.ok)
        if on_result:
            on_result(res)

    async def sleep_until(t: float) -> bool:
        """Wait until run time ``t``; False when interrupted."""
        delay = t - (time.perf_counter() - t0)
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), timeout=delay)
                return False
            except asyncio.TimeoutError:
                return True
        return not stop.is_set()

    async with aiohttp.ClientSession(connector=connector) as session:
        try:
            for seq, (spec, when) in enumerate(zip(specs, planned)):
                if timing.duration_s is not None and when > timing.duration_s:
                    break
                if not await sleep_until(when):
                    break
                if sem is not None:
                    acq = asyncio.ensure_future(sem.acquire())
                    stopper = asyncio.ensure_future(stop.wait())
                    done, _ = await asyncio.wait({acq, stopper}, return_when=asyncio.FIRST_COMPLETED)
                    stopper.cancel()
                    if acq not in done:
                        acq.cancel()
                        break
                    if stop.is_set():
                        sem.release()
                        break
                if timing.duration_s is not None and time.perf_counter() - t0 > timing.duration_s:
                    if sem is not None:
                        sem.release()
                    break
                res = RequestResult(index=spec.index, seq=seq, blocks=list(spec.blocks), tail=spec.tail,
                                    prompt_tokens=spec.prompt_tokens, max_tokens=spec.max_tokens,
                                    planned_s=float(when))
                task = asyncio.ensure_future(one(spec, res))
                tasks.add(task)
                inflight[task] = res
                task.add_done_callback(tasks.discard)
            # all sent (or stopped): wait for the rest unless interrupted
            while tasks and not stop.is_set():
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait(set(tasks) | {stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
        finally:
            interrupted = stop.is_set()
            for task in list(tasks):
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            finished = {id(r) for r in results}
            for res in inflight.values():
                if id(res) not in finished:
                    res.error = "interrupted: cancelled in flight"
                    results.append(res)
            if installed:
                loop.remove_signal_handler(signal.SIGINT)
    return results, interrupted
