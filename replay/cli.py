"""The ``replay`` command line: a thin layer over :mod:`replay`.

``replay --trace T --endpoint URL`` (or ``--launch "<server args>"``) replays a trace against a vLLM
OpenAI server and writes a results directory; ``--validate`` also writes the validation report,
which ``replay report RESULTS`` builds later from the results alone.  Bad input is one line on
stderr and exit status 2 (:func:`shadow.cli.run_cli`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path

import click

from shadow.cli_options import (NON_NEGATIVE_INT, POSITIVE_FLOAT, POSITIVE_INT,
                                allow_truncated_option, block_id_option, parse_name_list,
                                trace_option)
from shadow.errors import ShadowError

from replay.measure import DEFAULT_CACHED, DEFAULT_NEW, Grid, parse_token_list

logger = logging.getLogger("replay")


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _engine_options(f):
    f = click.option("--engine-block-size", type=int, default=None,
                     help="The engine's KV block size in tokens (default: read from the server's /metrics).")(f)
    f = click.option("--num-gpu-blocks", type=int, default=None,
                     help="The engine's number of KV blocks (default: read from the server's /metrics).")(f)
    f = click.option("--policies", default=None,
                     help="Other simulator policies to predict TTFT for (comma list; default: every "
                          "built policy that runs live).")(f)
    f = click.option("--cost-model", default="uniform", show_default=True,
                     help="Simulator cost model for its RESULT lines.")(f)
    return f


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@trace_option()
@click.option("--endpoint", default=None, help="Base URL of a running vLLM OpenAI server, e.g. http://127.0.0.1:8000.")
@click.option("--info-endpoint", default=None,
              help="Base URL of the vLLM server to read the model, block size and KV blocks from "
                   "(/v1/models, /metrics, /version), when --endpoint is a router in front of "
                   "several (a router forwards those calls as it forwards requests). Default: "
                   "--endpoint.")
@click.option("--launch", "launch_args", default=None, metavar='"ARGS"',
              help='Start `python -m vllm.entrypoints.openai.api_server ARGS` on 127.0.0.1, wait for '
                   '/health, replay, stop it. ARGS must include --model.')
@click.option("--launch-timeout", type=POSITIVE_FLOAT, default=900.0, show_default=True,
              help="Seconds to wait for a launched server to become healthy.")
@click.option("--model", default=None, help="Served model name (default: the server's only/first model).")
@click.option("--output", "-o", "output", default="replay-out", show_default=True,
              type=click.Path(file_okay=False), help="Results directory (created; files replaced).")
@click.option("--tokens-per-block", type=POSITIVE_INT, default=None,
              help="Tokens per trace block (default: the trace's block size); a multiple of the "
                   "engine's block size. Smaller values scale a trace down.")
@click.option("--trace-block-size", type=POSITIVE_INT, default=None,
              help="The trace's block size in tokens, if its header does not say.")
@click.option("--max-output-tokens", type=POSITIVE_INT, default=None, help="Cap on each request's output length.")
@click.option("--max-requests", type=POSITIVE_INT, default=None, help="Send at most this many requests.")
@click.option("--skip-requests", type=NON_NEGATIVE_INT, default=0, show_default=True,
              help="Skip this many requests at the start of the trace (with --max-requests: a slice).")
@click.option("--speedup", type=POSITIVE_FLOAT, default=None,
              help="Send at the trace's own arrival times divided by this (default schedule, 1).")
@click.option("--rate", type=POSITIVE_FLOAT, default=None, help="Send at this many requests/s (gamma/Poisson arrivals).")
@click.option("--burstiness", type=POSITIVE_FLOAT, default=1.0, show_default=True,
              help="Gamma shape of --rate's inter-arrival gaps: 1 is Poisson, smaller is burstier.")
@click.option("--concurrency", type=POSITIVE_INT, default=None,
              help="At most this many requests in flight; alone: back to back (1 = one at a time).")
@click.option("--duration", type=POSITIVE_FLOAT, default=None, help="Stop sending after this many seconds.")
@click.option("--request-timeout", type=POSITIVE_FLOAT, default=600.0, show_default=True,
              help="Seconds before one request counts as timed out.")
@click.option("--vocab-size", type=POSITIVE_INT, default=None,
              help="Token ids to draw from (default: read from the model's config/tokenizer files).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Token synthesis and arrival seed: a new seed gives new tokens (a cold cache).")
@click.option("--cache-salt", default=None, help="vLLM cache_salt sent with every request (isolates runs).")
@click.option("--session-headers", is_flag=True,
              help="Send each request's trace session id and user id as X-Session-ID and "
                   "X-User-ID headers (what vllm-router's consistent_hash and "
                   "sticky_least_loaded read); the endpoint may be a router.")
@click.option("--validate", is_flag=True, help="Also write the validation report (as `replay report`).")
@click.option("--recording", type=click.Path(), default=None,
              help="With --validate: the server's ShadowConnector record_dir (or a joined lcp): "
                   "predict from the engine's own recording with --timing recorded (for a "
                   "concurrent run).")
@click.option("--no-progress", is_flag=True, help="No progress bar even on a terminal.")
@click.option("--measure-profile", is_flag=True,
              help="Instead of a trace: measure a prefill profile (TTFT over a grid of cached and "
                   "new tokens, one request at a time) and write DIR/profile.jsonl, a "
                   "--cost-model profile:FILE (docs/replay.md).")
@click.option("--profile-cached", default=",".join(map(str, DEFAULT_CACHED)), show_default=True,
              metavar="LIST", help="--measure-profile: cached tokens of the grid (multiples of the "
                                   "engine's block size; k = 1024).")
@click.option("--profile-new", default=",".join(map(str, DEFAULT_NEW)), show_default=True,
              metavar="LIST", help="--measure-profile: new tokens of the grid (the cached-0 row "
                                   "also gets every cached + new).")
@click.option("--profile-repeats", type=POSITIVE_INT, default=3, show_default=True,
              help="--measure-profile: measured repeats per point (after one warm-up).")
@_engine_options
@allow_truncated_option()
@block_id_option()
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, trace: str | None, endpoint: str | None, info_endpoint: str | None,
        launch_args: str | None,
        launch_timeout: float, model: str | None, output: str, tokens_per_block: int | None,
        trace_block_size: int | None, max_output_tokens: int | None, max_requests: int | None,
        skip_requests: int, speedup: float | None, rate: float | None, burstiness: float,
        concurrency: int | None, duration: float | None, request_timeout: float,
        vocab_size: int | None, seed: int, cache_salt: str | None, session_headers: bool,
        validate: bool, recording: str | None, no_progress: bool, measure_profile: bool,
        profile_cached: str, profile_new: str, profile_repeats: int,
        engine_block_size: int | None, num_gpu_blocks: int | None, policies: str | None,
        cost_model: str, allow_truncated: bool, block_id: str, verbose: int) -> None:
    """Replay a trace against a real vLLM server: TTFT, cached tokens, and the simulator's prediction.

    Every trace block id becomes a fixed run of token ids (the same on every run and machine), sent
    as token-id prompts, so the engine's prefix cache sees the trace's exact sharing.
    """
    _setup_logging(verbose)
    if ctx.invoked_subcommand is not None:
        if trace:
            raise click.UsageError(f"--trace does not go with `replay {ctx.invoked_subcommand}`")
        return
    if measure_profile:
        if trace:
            raise click.UsageError("--measure-profile measures a grid, not a trace: no --trace")
        if validate or recording:
            raise click.UsageError("--validate is for a trace's replay, not --measure-profile")
    elif not trace:
        raise click.UsageError("--trace is required (or a subcommand: replay report RESULTS)")
    if bool(endpoint) == bool(launch_args):
        raise click.UsageError("give exactly one of --endpoint and --launch")
    if measure_profile:
        grid = Grid(parse_token_list(profile_cached, "--profile-cached", 0),
                    parse_token_list(profile_new, "--profile-new", 1))
        _launched(launch_args, launch_timeout, Path(output), endpoint, lambda base: _profile(
            base, Path(output), model, grid, profile_repeats, vocab_size, seed, cache_salt,
            request_timeout, engine_block_size, not no_progress))
        return
    from replay.timing import make_timing

    timing = make_timing(speedup=speedup, rate=rate, burstiness=burstiness, concurrency=concurrency,
                         duration_s=duration, seed=seed)
    if max_output_tokens is not None and max_output_tokens <= 0:
        raise ShadowError(f"bad --max-output-tokens {max_output_tokens}: must be positive")
    if max_requests is not None and max_requests <= 0:
        raise ShadowError(f"bad --max-requests {max_requests}: must be positive")
    if not Path(trace).is_file():
        raise ShadowError(f"{trace}: no such trace file")
    if recording is not None and not validate:
        raise click.UsageError("--recording is for --validate (or `replay report --recording`)")
    if recording is not None and not Path(recording).exists():
        raise ShadowError(f"--recording {recording}: no such file or directory")
    if validate:
        from shadow.sim.cost import parse_cost_model

        parse_cost_model(cost_model)
    # NOTE: the trace and the options are checked before any server is launched or contacted
    workload = _load(trace, tokens_per_block=tokens_per_block, trace_block_size=trace_block_size,
                     max_output_tokens=max_output_tokens, max_requests=max_requests,
                     skip_requests=skip_requests, allow_truncated=allow_truncated,
                     block_id=block_id)
    if engine_block_size is not None:
        from replay.workload import check_tokens_per_block

        check_tokens_per_block(workload[1], engine_block_size)
    out_dir = Path(output)
    opts = dict(trace=trace, workload=workload, model=model, out_dir=out_dir, timing=timing,
                info_endpoint=info_endpoint,
                max_output_tokens=max_output_tokens, max_requests=max_requests,
                skip_requests=skip_requests, request_timeout=request_timeout,
                vocab_size=vocab_size, seed=seed, cache_salt=cache_salt,
                session_headers=session_headers,
                progress=not no_progress, engine_block_size=engine_block_size,
                num_gpu_blocks=num_gpu_blocks)
    interrupted = _launched(launch_args, launch_timeout, out_dir, endpoint,
                            lambda base: _run(endpoint=base, launched=launch_args, **opts))
    if validate:
        _report(out_dir, engine_block_size, num_gpu_blocks, tokens_per_block, policies, cost_model,
                recording)
    if interrupted:
        sys.exit(130)


def _launched(launch_args: str | None, launch_timeout: float, out_dir: Path,
              endpoint: str | None, body):
    """``body(base URL)`` against ``endpoint``, or against a server started with
    ``launch_args`` (log in ``out_dir/server.log``) and stopped afterwards."""
    if not launch_args:
        return body(endpoint)
    from replay.server import launch

    out_dir.mkdir(parents=True, exist_ok=True)
    click.echo(f"launching a vLLM server (log {out_dir / 'server.log'}) ...", err=True)
    with launch(launch_args, log_path=out_dir / "server.log", timeout_s=launch_timeout) as (base, _):
        return body(base)


def _profile(endpoint: str, out_dir: Path, model: str | None, grid: "Grid", repeats: int,
             vocab_size: int | None, seed: int, cache_salt: str | None, request_timeout: float,
             engine_block_size: int | None, progress: bool) -> None:
    from replay.client import Progress
    from replay.measure import PROFILE, measure_profile
    from replay.server import server_info

    info = server_info(endpoint, model)
    if engine_block_size:
        info.block_size = engine_block_size
    if info.prefix_caching is False:
        raise ShadowError(f"{endpoint}: the server runs with prefix caching off: no point with "
                          f"cached tokens can be measured")
    vocab = _vocab(info, vocab_size)
    points = grid.points()
    click.echo(f"measuring a prefill profile of {len(points)} points x {repeats} repeats (after "
               f"a warm-up each) against {endpoint} model {info.model}", err=True)
    bar = Progress(len(points), enabled=None if progress else False)
    env = measure_profile(endpoint=endpoint, out_dir=out_dir, model=model, grid=grid,
                          repeats=repeats, vocab=vocab, seed=seed, cache_salt=cache_salt,
                          request_timeout=request_timeout, server=info, progress=bar)
    bar.close()
    click.echo(f"profile of {len(points)} points in {out_dir / PROFILE} ({env['duration_s']:.1f} s); "
               f"use it as --cost-model profile:{out_dir / PROFILE}", err=True)


def _vocab(info, vocab_size: int | None):
    from replay.tokens import Vocab, resolve_model_dir, vocab_from_model_dir

    d = resolve_model_dir(info.root) or resolve_model_dir(info.model)
    if vocab_size is not None:
        special: tuple[int, ...] = ()
        if d is not None:
            try:
                special = vocab_from_model_dir(d).special
            except ShadowError:
                pass
        return Vocab(size=vocab_size, special=special, source="--vocab-size")
    if d is None:
        raise ShadowError(f"cannot read the vocabulary of model {info.model!r} (root {info.root!r} is "
                          f"not a local directory): pass --vocab-size")
    return vocab_from_model_dir(d)


def _load(trace: str, **kwargs) -> tuple:
    """(trace block size, tokens per block, request specs) of the slice of ``trace`` to send;
    a damaged trace or an empty slice is a ShadowError."""
    from replay.workload import load_requests

    tbs, tpb, specs = load_requests(trace, **kwargs)
    if not specs:
        raise ShadowError(f"{trace}: no requests to send (check --skip-requests/--max-requests)")
    return tbs, tpb, specs


def _run(*, endpoint: str, launched: str | None, trace: str, workload: tuple, model: str | None,
         info_endpoint: str | None,
         out_dir: Path, max_output_tokens: int | None, max_requests: int | None,
         skip_requests: int, timing, request_timeout: float, vocab_size: int | None, seed: int,
         cache_salt: str | None, session_headers: bool, progress: bool,
         engine_block_size: int | None,
         num_gpu_blocks: int | None) -> bool:
    from dataclasses import asdict

    from replay.client import ClientConfig, Progress, run_requests
    from replay.results import summarize, summary_text, write_results
    from replay.server import server_info
    from replay.timing import send_times
    from replay.tokens import TokenSynth
    from replay.workload import check_tokens_per_block

    tbs, tpb, specs = workload
    info = server_info(info_endpoint or endpoint, model)
    bs = engine_block_size or info.block_size
    nb = num_gpu_blocks or info.num_gpu_blocks
    if info.prefix_caching is False:
        click.echo("warning: the server runs with prefix caching off: every cached count will be 0",
                   err=True)
    vocab = _vocab(info, vocab_size)
    check_tokens_per_block(tpb, bs)
    if info.max_model_len:
        too_long = sum(1 for s in specs if s.prompt_tokens + s.max_tokens > info.max_model_len)
        if too_long:
            click.echo(f"warning: {too_long} requests exceed the server's max_model_len "
                       f"{info.max_model_len}; the server will refuse them (counted as errors). "
                       f"Scale down with --tokens-per-block or --max-output-tokens.", err=True)
    synth = TokenSynth(vocab, seed=seed)
    planned = send_times(timing, [s.arrival_s for s in specs]).tolist()
    click.echo(f"replaying {len(specs)} requests of {trace} ({tpb} tokens per block, trace block "
               f"{tbs}) against {endpoint} model {info.model}; {timing.describe()}; {vocab.describe()}",
               err=True)
    cfg = ClientConfig(endpoint=endpoint, model=info.model, request_timeout_s=request_timeout,
                       cache_salt=cache_salt, session_headers=session_headers)
    bar = Progress(len(specs), enabled=None if progress else False)
    started = time.time()
    results, interrupted = asyncio.run(run_requests(
        cfg, specs, planned, timing,
        lambda s: synth.prompt(s.blocks, tpb, s.index, s.tail), progress=bar))
    bar.close()
    summary = summarize(results, interrupted=interrupted)
    run = {
        "trace": str(trace), "trace_block_size": tbs, "tokens_per_block": tpb,
        "engine_block_size": bs, "num_gpu_blocks": nb, "endpoint": endpoint,
        "info_endpoint": info_endpoint, "launch": launched,
        "model": info.model, "server": asdict(info), "timing": asdict(timing), "seed": seed,
        "cache_salt": cache_salt, "session_headers": session_headers,
        "max_output_tokens": max_output_tokens,
        "max_requests": max_requests, "skip_requests": skip_requests,
        "vocab": {"size": vocab.size, "n_special": len(vocab.special), "source": vocab.source},
        "started_unix": started, "n_planned": len(specs),
    }
    write_results(out_dir, results, run, summary)
    click.echo(summary_text(summary))
    if summary["n_ok"] and not summary["cached_tokens_reported"]:
        click.echo("warning: the server did not report cached tokens: start it with "
                   "--enable-prompt-tokens-details (--launch adds it)", err=True)
    click.echo(f"results in {out_dir}/ (requests.jsonl, run.json, summary.json)", err=True)
    return interrupted


def _report(path: Path, engine_block_size: int | None, num_gpu_blocks: int | None,
            tokens_per_block: int | None, policies: str | None, cost_model: str,
            recording: str | None = None) -> dict:
    from replay.report import build_report, report_text

    rep = build_report(path, block_size=engine_block_size, num_gpu_blocks=num_gpu_blocks,
                       tokens_per_block=tokens_per_block,
                       policies=parse_name_list(policies) if policies is not None else None,
                       cost_model=cost_model, recording=recording)
    click.echo(report_text(rep))
    return rep


@cli.command("report")
@click.argument("results", type=click.Path(exists=True))
@click.option("--tokens-per-block", type=int, default=None,
              help="Tokens per trace block of the run (default: from run.json).")
@_engine_options
@click.option("--json", "as_json", is_flag=True, help="Print report.json instead of the text report.")
@click.option("--recording", type=click.Path(exists=True), default=None,
              help="The engine's own ShadowConnector recording of this run (an lcp file or its "
                   "record_dir): predict from it with --timing recorded, in the engine's order "
                   "(for a concurrent run).")
def report_cmd(results: str, tokens_per_block: int | None, engine_block_size: int | None,
               num_gpu_blocks: int | None, policies: str | None, cost_model: str, as_json: bool,
               recording: str | None) -> None:
    """Validation report for a replay's RESULTS directory: predicted vs measured cached tokens,
    a fitted prefill model, predicted TTFT per policy, and PNG plots (written into RESULTS)."""
    from replay.report import build_report, report_text

    rep = build_report(results, block_size=engine_block_size, num_gpu_blocks=num_gpu_blocks,
                       tokens_per_block=tokens_per_block,
                       policies=parse_name_list(policies) if policies is not None else None,
                       cost_model=cost_model, recording=recording)
    click.echo(json.dumps({k: v for k, v in rep.items() if k != "requests"}, indent=2)
               if as_json else report_text(rep))


def main(args: list[str] | None = None) -> None:
    from shadow.cli import run_cli

    run_cli(cli, args, "replay")


if __name__ == "__main__":
    main()
