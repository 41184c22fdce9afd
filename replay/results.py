"""What a replay measured: one record per request, the run's metadata, and the summary.

A results directory holds

* ``requests.jsonl``: one JSON object per request sent (fields of :class:`RequestResult`), in the
  order the requests finished;
* ``run.json``: the run's settings and what was learnt from the server (model, engine block size,
  number of KV blocks), enough to predict the engine's cache without the trace;
* ``summary.json``: :func:`summarize` of the records;
* after ``replay report``: ``report.json``, ``report.md`` and the PNG plots.

Every file is written to a temporary name and renamed when complete.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from shadow.atomic import atomic_write_text
from shadow.errors import ShadowError

REQUESTS = "requests.jsonl"
RUN = "run.json"
SUMMARY = "summary.json"


@dataclass
class RequestResult:
    index: int  # position in the trace
    seq: int  # position in the replay (send order)
    blocks: list[int]  # trace ids of the full blocks
    tail: int  # request-keyed tokens after them
    prompt_tokens: int  # tokens sent
    max_tokens: int
    planned_s: float = 0.0  # when the schedule said to send it (from the run's start)
    sent_s: float | None = None  # when it was sent
    first_token_s: float | None = None
    end_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int | None = None  # usage.completion_tokens
    prompt_tokens_reported: int | None = None  # usage.prompt_tokens
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    status: int | None = None  # HTTP status
    error: str | None = None  # None when it succeeded
    reached_engine: bool = False  # a response (status 200) started: the engine saw the request

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RequestResult":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


def write_results(out_dir: Path, results: Iterable[RequestResult], run: dict[str, Any],
                  summary: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / REQUESTS, "".join(r.to_json() + "\n" for r in results))
    atomic_write_text(out_dir / RUN, json.dumps(run, indent=2, sort_keys=True) + "\n")
    atomic_write_text(out_dir / SUMMARY, json.dumps(summary, indent=2, sort_keys=True) + "\n")


def read_results(path: str | Path) -> tuple[Path, dict[str, Any], list[RequestResult]]:
    """Read a results directory (or its requests.jsonl); errors name the file and line."""
    p = Path(path)
    d = p if p.is_dir() else p.parent
    req = d / REQUESTS if p.is_dir() else p
    if not req.is_file():
        raise ShadowError(f"{path}: no {REQUESTS} here: not a replay results directory")
    run_path = d / RUN
    run: dict[str, Any] = {}
    if run_path.is_file():
        try:
            run = json.loads(run_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ShadowError(f"{run_path}:{exc.lineno}: bad JSON: {exc.msg}") from None
    out = []
    with open(req, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(RequestResult.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError) as exc:
                raise ShadowError(f"{req}:{lineno}: bad request record: {exc}") from None
    return d, run, out


def _pcts(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)), "p99": float(np.percentile(a, 99))}


def summarize(results: list[RequestResult], *, interrupted: bool = False) -> dict[str, Any]:
    """Counts, latency percentiles (seconds), throughput and the measured hit ratio."""
    ok = [r for r in results if r.ok]
    errs: dict[str, int] = {}
    for r in results:
        if r.error is not None:
            kind = r.error.split(":", 1)[0]
            errs[kind] = errs.get(kind, 0) + 1
    ends = [r.end_s for r in results if r.end_s is not None]
    starts = [r.sent_s for r in results if r.sent_s is not None]
    span = (max(ends) - min(starts)) if ends and starts else 0.0
    cached = [r for r in ok if r.cached_tokens is not None]
    prompt_ok = sum(r.prompt_tokens for r in ok)
    out_ok = sum(r.output_tokens or 0 for r in ok)
    itl = [x for r in ok for x in r.itl_s]
    s: dict[str, Any] = {
        "n_requests": len(results),
        "n_ok": len(ok),
        "n_errors": len(results) - len(ok),
        "errors": errs,
        "interrupted": interrupted,
        "duration_s": span,
        "throughput_req_s": (len(ok) / span) if span > 0 else None,
        "prompt_tokens": prompt_ok,
        "output_tokens": out_ok,
        "input_tok_s": (prompt_ok / span) if span > 0 else None,
        "output_tok_s": (out_ok / span) if span > 0 else None,
        "ttft_s": _pcts([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_s": _pcts(itl),
        "e2e_s": _pcts([r.e2e_s for r in ok if r.e2e_s is not None]),
        "cached_tokens_reported": bool(cached) or not ok,
        "cached_tokens": sum(r.cached_tokens or 0 for r in cached),
        "hit_ratio": (sum(r.cached_tokens or 0 for r in cached) / sum(r.prompt_tokens for r in cached))
        if cached and sum(r.prompt_tokens for r in cached) else None,
    }
    return s


def _fmt(x: float | None, scale: float = 1e3, unit: str = "ms") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x * scale:.1f} {unit}"


def summary_text(s: dict[str, Any]) -> str:
    t = s["ttft_s"]
    lines = [
        f"requests {s['n_requests']}: ok {s['n_ok']}, errors {s['n_errors']}"
        + (f" ({', '.join(f'{k} {v}' for k, v in sorted(s['errors'].items()))})" if s["errors"] else "")
        + (" [interrupted]" if s["interrupted"] else ""),
        f"duration {s['duration_s']:.2f} s, throughput "
        + (f"{s['throughput_req_s']:.2f} req/s, {s['input_tok_s']:.0f} prompt tok/s, "
           f"{s['output_tok_s']:.0f} output tok/s" if s["throughput_req_s"] else "-"),
        f"TTFT p50 {_fmt(t['p50'])}  p90 {_fmt(t['p90'])}  p99 {_fmt(t['p99'])}  mean {_fmt(t['mean'])}",
        f"ITL  p50 {_fmt(s['itl_s']['p50'])}  p90 {_fmt(s['itl_s']['p90'])}  p99 {_fmt(s['itl_s']['p99'])}",
        f"E2E  p50 {_fmt(s['e2e_s']['p50'])}  p90 {_fmt(s['e2e_s']['p90'])}  p99 {_fmt(s['e2e_s']['p99'])}",
        (f"cached tokens {s['cached_tokens']} of {s['prompt_tokens']} prompt tokens, hit ratio "
         f"{s['hit_ratio']:.4f}" if s["hit_ratio"] is not None else
         "cached tokens: not reported by the server (start it with --enable-prompt-tokens-details)"
         if not s["cached_tokens_reported"] else "cached tokens: -"),
    ]
    return "\n".join(lines)
