"""Measuring a prefill profile (``replay --measure-profile``): TTFT over a grid of cached and new
tokens on a real vLLM server, written as a ``profile:FILE`` table (shadow/sim/cost/profile.py).

For each grid point ``(c, n)`` (``c`` a multiple of the engine's block size B), one request at a
time:

1. with ``c > 0``, send a *prefix* of ``c`` fresh tokens (one output token), so its ``c / B``
   full blocks enter the engine's prefix cache;
2. send the prefix followed by ``n`` fresh tokens and measure the TTFT (streamed, as
   :mod:`replay.client`); the response's ``cached_tokens`` must be exactly ``c``, else the
   repeat does not count (and is said so).

Each point runs one warm-up and ``repeats`` measured repeats, each with its own fresh tokens
(a repeat never hits what an earlier one cached); the file gets the median, the minimum and the
maximum of the measured repeats.  The cached-0 row is measured at every ``n`` of the grid and
at every ``c + n``, so the no-hit time of every measured hit is itself a measured point.  When a
row would be refused as not monotone in new tokens
(:func:`shadow.sim.cost.profile.monotone_violation`: one median far below a point with fewer new
tokens, nearly always one noisy median), both points are measured ``repeats`` more times, up to
:data:`REMEASURE_ROUNDS` rounds; a row still refused after that is written as measured (and the
profile loader names it).

Tokens: the keyed generator of :mod:`replay.tokens` in a domain of its own, keyed by (point,
repeat, part); every request carries a ``cache_salt`` of the run, so no block of an earlier run
on the same server is hit.  Outputs (each written to a temporary name, then renamed):
``profile.jsonl`` (an ``env`` line, then one line per point, ascending) and ``measurements.jsonl``
(every request sent, with its TTFT, cached tokens and error).
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shadow.atomic import atomic_write_text
from shadow.errors import ShadowError
from shadow.sim.cost.profile import monotone_violation

from replay.client import ClientConfig, send_one
from replay.results import RequestResult
from replay.tokens import TokenSynth

logger = logging.getLogger(__name__)

PROFILE = "profile.jsonl"
MEASUREMENTS = "measurements.jsonl"
DEFAULT_CACHED = (0, 1024, 4096, 16384)
DEFAULT_NEW = (256, 1024, 4096)
#: Rounds of more repeats for the points of a row the profile would refuse as not monotone.
REMEASURE_ROUNDS = 3
#: Repeats per point at most (keys the token streams: point * MAX_REPEATS + repeat).
MAX_REPEATS = 1000


def parse_token_list(text: str, what: str, low: int) -> tuple[int, ...]:
    """``0,1024,4k`` -> ``(0, 1024, 4096)`` (k = 1024), each >= ``low``, sorted, each once."""
    out = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        mult = 1024 if part[-1] in "kK" else 1
        digits = part[:-1] if mult > 1 else part
        if not digits.isdigit() or int(digits) * mult < low:
            raise ShadowError(f"bad {what} value {part!r}: expected an integer >= {low} "
                              f"(k = 1024)")
        out.add(int(digits) * mult)
    if not out:
        raise ShadowError(f"empty {what} list")
    return tuple(sorted(out))


@dataclass(frozen=True)
class Grid:
    """The points to measure: ``cached`` x ``new``, plus the cached-0 row at every ``c + n``."""

    cached: tuple[int, ...]
    new: tuple[int, ...]

    def points(self) -> list[tuple[int, int]]:
        pts = {(c, n) for c in self.cached for n in self.new}
        pts |= {(0, n) for n in self.new} | {(0, c + n) for c in self.cached for n in self.new}
        return sorted(pts)


def check_grid(grid: Grid, block_size: int, max_model_len: int | None) -> None:
    """Refuse a grid the server cannot measure as asked (one line)."""
    if not grid.cached or not grid.new:
        raise ShadowError("--profile-cached and --profile-new need at least one value each")
    for c in grid.cached:
        if c < 0 or c % block_size:
            raise ShadowError(f"--profile-cached {c}: not a multiple of the engine's block size "
                              f"{block_size} (only whole blocks are cached)")
    for n in grid.new:
        if n < 1:
            raise ShadowError(f"--profile-new {n}: a prefill computes at least one token")
    if max_model_len:
        c, n = max(grid.points(), key=lambda p: p[0] + p[1])
        if c + n + 1 > max_model_len:
            raise ShadowError(f"the point cached {c}, new {n} needs {c + n + 1} tokens (with the "
                              f"output token), more than the server's max_model_len "
                              f"{max_model_len}")


@dataclass
class PointResult:
    cached: int
    new: int
    ttft_s: list[float] = field(default_factory=list)
    rejected: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.ttft_s)

    def line(self, model: str) -> dict[str, Any]:
        return {"model": model, "cached": self.cached, "new": self.new,
                "s": self.median, "min_s": min(self.ttft_s),
                "max_s": max(self.ttft_s), "repeats": len(self.ttft_s)}


class _Session:
    """Sends the requests of one measurement, one at a time, and logs each."""

    def __init__(self, session, cfg: ClientConfig, synth: TokenSynth,
                 log: list[dict[str, Any]]) -> None:
        self.session, self.cfg, self.synth, self.log = session, cfg, synth, log
        self.t0 = time.perf_counter()
        self.seq = 0

    async def _send(self, prompt: list[int], c: int, n: int, rep: int,
                    part: str) -> RequestResult:
        res = RequestResult(index=-1, seq=self.seq, blocks=[], tail=0,
                            prompt_tokens=len(prompt), max_tokens=1)
        self.seq += 1
        await send_one(self.session, self.cfg, res, prompt, self.t0)
        self.log.append({"cached": c, "new": n, "repeat": rep, "part": part, **_record(res)})
        if res.error:
            raise ShadowError(f"the {'prefix ' if part == 'prefix' else ''}request of cached {c}, "
                              f"new {n} failed: {res.error}")
        return res

    async def point(self, k: int, pr: "PointResult", reps: range) -> None:
        """Repeats ``reps`` of point ``k`` (repeat 0 is the warm-up, not counted)."""
        c, n = pr.cached, pr.new
        for rep in reps:
            base = (k * MAX_REPEATS + rep) * 2        # NOTE: fresh tokens for every repeat
            prefix = self.synth.profile_tokens(base, c) if c else []
            if c:
                await self._send(prefix, c, n, rep, "prefix")
            res = await self._send(prefix + self.synth.profile_tokens(base + 1, n), c, n, rep,
                                   "measured")
            if res.cached_tokens is None:
                raise ShadowError("the server does not report cached tokens: start it with "
                                  "--enable-prompt-tokens-details (--launch adds it)")
            if rep == 0:
                continue
            if res.cached_tokens != c:
                # NOTE: another client's traffic evicted the prefix, or the cache is smaller
                # than the prefix: the time is not that of (c, n)
                pr.rejected += 1
                logger.warning("cached %d, new %d, repeat %d: the engine reported %d cached "
                               "tokens, not %d; not counted", c, n, rep, res.cached_tokens, c)
                continue
            pr.ttft_s.append(float(res.ttft_s))


async def _measure(cfg: ClientConfig, synth: TokenSynth, points: list[tuple[int, int]],
                   repeats: int, log: list[dict[str, Any]], progress) -> list[PointResult]:
    import aiohttp

    out = [PointResult(c, n) for c, n in points]
    async with aiohttp.ClientSession() as session:
        s = _Session(session, cfg, synth, log)
        for k, pr in enumerate(out):
            await s.point(k, pr, range(repeats + 1))
            if not pr.ttft_s:
                raise ShadowError(f"cached {pr.cached}, new {pr.new}: no repeat hit exactly "
                                  f"{pr.cached} cached tokens (is the KV cache smaller than the "
                                  f"prefix, or is another client using the server?)")
            if progress is not None:
                progress.update(True)
        # NOTE: a row the profile loader would refuse (a point far below one with fewer new
        # tokens) is usually one noisy median: both points get more repeats, a few times
        for again in range(1, REMEASURE_ROUNDS + 1):
            bad = monotone_violation({(p.cached, p.new): (p.median, min(p.ttft_s),
                                                          max(p.ttft_s)) for p in out})
            if bad is None:
                break
            c, n_hi, n_lo = bad
            logger.warning("cached %d: new %d measured faster than new %d; measuring both "
                           "again", c, n_lo, n_hi)
            for k, pr in enumerate(out):
                if pr.cached == c and pr.new in (n_hi, n_lo):
                    first = 1 + again * repeats
                    await s.point(k, pr, range(first, first + repeats))
    return out


def _record(r: RequestResult) -> dict[str, Any]:
    return {"prompt_tokens": r.prompt_tokens, "ttft_s": r.ttft_s, "cached_tokens": r.cached_tokens,
            "error": r.error}


def measure_profile(*, endpoint: str, out_dir: Path, model: str | None, grid: Grid, repeats: int,
                    vocab, seed: int, cache_salt: str | None, request_timeout: float,
                    server, progress=None) -> dict[str, Any]:
    """Measure ``grid`` on the server at ``endpoint`` (:class:`~replay.server.ServerInfo`
    ``server``) and write the profile; returns its env line."""
    if not 1 <= repeats < MAX_REPEATS // (REMEASURE_ROUNDS + 1):
        raise ShadowError(f"--profile-repeats {repeats}: 1 to "
                          f"{MAX_REPEATS // (REMEASURE_ROUNDS + 1) - 1}")
    bs = server.block_size
    if not bs:
        raise ShadowError(f"{endpoint}: the server's block size is unknown (no /metrics): pass "
                          f"--engine-block-size")
    check_grid(grid, bs, server.max_model_len)
    salt = cache_salt or f"shadow-profile-{time.time_ns()}"
    cfg = ClientConfig(endpoint=endpoint, model=server.model, request_timeout_s=request_timeout,
                       cache_salt=salt)
    synth = TokenSynth(vocab, seed=seed)
    points = grid.points()
    log: list[dict[str, Any]] = []
    started = time.time()
    results = asyncio.run(_measure(cfg, synth, points, repeats, log, progress))
    name = model or server.model
    env = {"env": True, "engine": "vllm", "version": server.version, "model": name,
           "block_size": bs, "num_gpu_blocks": server.num_gpu_blocks,
           "max_model_len": server.max_model_len, "endpoint": endpoint, "repeats": repeats,
           "warmups": 1, "seed": seed, "cache_salt": salt, "measured_unix": started,
           "duration_s": time.time() - started, "server": asdict(server),
           "measure": "s: median TTFT at concurrency 1 (client clock, streamed, one output "
                      "token)"}
    lines = [env] + [r.line(name) for r in results]
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / MEASUREMENTS, "".join(json.dumps(x) + "\n" for x in log))
    atomic_write_text(out_dir / PROFILE, "".join(json.dumps(x) + "\n" for x in lines))
    rejected = sum(r.rejected for r in results)
    if rejected:
        logger.warning("%d repeats were not counted (their cached tokens were not the point's)",
                       rejected)
    return env
