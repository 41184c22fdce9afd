"""``shadow convert`` and ``shadow stat``: thin click commands over :mod:`shadow.trace`."""

from __future__ import annotations

import json
import os

import click

from shadow.cli_options import allow_truncated_option, block_id_option, parse_size
from shadow.errors import ShadowError
from shadow.progress import progress_bar
from shadow.trace.sessions import DEFAULT_SESSION_WINDOW


def _time_unit_option():
    return click.option(
        "--time-unit", type=click.Choice(["auto", "s", "ms", "us"]), default="auto",
        show_default=True,
        help="JSONL only: unit of timestamp/timestamp_arrival. auto: seconds if any timestamp is a"
             " JSON float, else ms (seconds for Qwen-shaped lines with all values < 100000).")


@click.command("convert", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@block_id_option()
@allow_truncated_option()
@_time_unit_option()
@click.option("--block-size", "block_size", type=click.IntRange(1, (1 << 32) - 1), default=None,
              help="Tokens per block to record in the header (default: inferred from"
                   " input_length and the number of hash_ids).")
@click.option("--level", type=click.IntRange(1, 19), default=1, show_default=True,
              help="zstd compression level for a .zst output (1: half the CPU time of 3,"
                   " ~4% larger).")
@click.option("--frame-size", "frame_size", default="4M", show_default=True,
              help="Decompressed bytes per zstd frame of a .zst output (k/m suffixes; frames"
                   " are decoded in parallel when read; 0: one body frame, no frame index).")
@click.option("--infer-sessions", "infer_sessions", is_flag=True,
              help="Infer sessions, turns and parents from prefix continuation: a request whose"
                   " prompt begins with an earlier request's whole block sequence continues it"
                   " (docs/trace.md). Refused for a trace that has sessions or parents.")
@click.option("--session-window", "session_window", type=click.IntRange(1, 1 << 40),
              default=None,
              help="With --infer-sessions: request ends remembered (an LRU; a conversation idle"
                   f" for longer starts a new session). [default: {DEFAULT_SESSION_WINDOW}]")
def convert(paths: tuple[str, ...], block_id: str, allow_truncated: bool, time_unit: str,
            block_size: int | None, level: int, frame_size: str, infer_sessions: bool,
            session_window: int | None) -> None:
    """Convert traces: IN... OUT.

    \b
    JSONL -> lcp:   shadow convert trace.jsonl trace.lcp.zst
    lcp -> JSONL:   shadow convert trace.lcp.zst slice.jsonl   (dense ids)
    segments -> lcp: shadow convert seg1.lcp.zst seg2.lcp.zst.partial joined.lcp.zst
    replicas -> fleet: shadow convert r0/*.lcp.zst* r1/*.lcp.zst* fleet.lcp.zst  (lcp v2)
    recording -> lcp: shadow convert rec/ joined.lcp.zst   (every segment, across restarts)

    The input format is told by content; the output format by the name (.lcp, .lcp.zst,
    .jsonl).  Outputs are written to a temporary name and renamed on success.  A trace without
    sessions gets them from its parent_chat_id chains (session = the root's chat id).
    Several replicas' recordings (one fleet_key) merge into one trace that keeps each
    request's replica (docs/lcp.md "lcp v2", docs/fleet.md).
    """
    from shadow.trace.convert import convert_file

    if len(paths) < 2:
        raise click.UsageError("need at least one input and one output: shadow convert IN... OUT")
    if session_window is not None and not infer_sessions:
        raise click.UsageError("--session-window applies only with --infer-sessions")
    inputs, output = list(paths[:-1]), paths[-1]
    frame_bytes = 0 if frame_size.strip() == "0" else parse_size(frame_size, what="frame size")
    size = os.path.getsize(inputs[0]) if os.path.isfile(inputs[0]) else None
    with progress_bar(size if len(inputs) == 1 else None, "reading") as cb:
        summary = convert_file(inputs, output, block_id=block_id, time_unit=time_unit,
                               allow_truncated=allow_truncated, level=level,
                               frame_bytes=frame_bytes, block_size_tokens=block_size, progress=cb,
                               infer_sessions=infer_sessions,
                               session_window=session_window or DEFAULT_SESSION_WINDOW)
    parts = [f"wrote {summary['output']}: {summary['n_requests']:,} requests,"
             f" {summary['n_block_accesses']:,} blocks"]
    if "n_unique_blocks" in summary:
        parts.append(f"{summary['n_unique_blocks']:,} unique, {summary['n_sessions']:,} sessions,"
                     f" {summary['n_users']:,} users, {summary['n_types']} types,"
                     f" max {summary['max_blocks_per_request']:,} blocks/request,"
                     f" {summary['block_size_tokens']} tokens/block")
    if summary.get("replicas"):
        parts.append(f"{len(summary['replicas'])} replicas ({', '.join(summary['replicas'])})")
    click.echo(", ".join(parts))
    if "recording" in summary:
        click.echo(f"read {summary['recording'].line()}")


@click.command("stat", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("trace", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@block_id_option()
@allow_truncated_option()
@_time_unit_option()
def stat(trace: str, as_json: bool, block_id: str, allow_truncated: bool, time_unit: str) -> None:
    """Print what a trace holds: requests, block accesses, unique blocks, sessions, users, types,
    max blocks per request, block size, time span, infinite-cache hit ratio, reuse distances.
    TRACE may be a recording directory (every segment, across restarts)."""
    from shadow.trace.reader import read_header
    from shadow.trace.header import sniff
    from shadow.trace.stat import format_stats, trace_stats

    total = None
    if os.path.isfile(trace) and sniff(trace) in ("lcp", "lcp.zst"):
        try:
            h = read_header(trace)
            total = h.n_block_accesses if h.counts_valid else None
        except ShadowError:
            total = None  # trace_stats reports it
    with progress_bar(total, "reading") as cb:
        s = trace_stats(trace, allow_truncated=allow_truncated, block_id=block_id,
                        time_unit=time_unit,
                        progress=(lambda _r, acc: cb(acc)) if cb else None)
    if as_json:
        click.echo(json.dumps(s, sort_keys=True))
    else:
        click.echo(format_stats(s))


@click.command("synth", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--seed", type=click.IntRange(0, (1 << 63) - 1), default=0, show_default=True,
              help="Random seed: the same seed and options give the same file.")
@click.option("--sessions", type=click.IntRange(1, 10_000_000), default=400, show_default=True,
              help="Conversations to generate.")
@click.option("--block-size", "block_size", type=click.IntRange(1, 1 << 20), default=16,
              show_default=True, help="Tokens per block.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True, max=1e6), default=2.0,
              show_default=True, help="New sessions per second (Poisson arrivals).")
@click.option("--branch", type=click.FloatRange(0, 1), default=0.05, show_default=True,
              help="Probability that a turn (from turn 3) edits the previous message: a second"
                   " continuation of the history before it.")
@click.option("--max-context", "max_context", type=click.IntRange(1, 1 << 30), default=16384,
              show_default=True,
              help="Prompt tokens at most; a longer conversation keeps its system prompt and its"
                   " newest history (a sliding window).")
@click.option("--level", type=click.IntRange(1, 19), default=1, show_default=True,
              help="zstd compression level for a .zst output.")
def synth(output: str, seed: int, sessions: int, block_size: int, rate: float, branch: float,
          max_context: int, level: int) -> None:
    """Write a synthetic multi-turn trace OUT (.lcp or .lcp.zst): sessions of four request
    types (chat, code, agent, rag) with shared system prompts, prompts that continue their
    history, branches, a context limit and interleaved arrival times (docs/trace.md)."""
    from shadow.trace.convert import output_kind
    from shadow.trace.synth import TYPES, SynthParams, write_synth

    if output_kind(output) == "jsonl":
        raise click.UsageError("OUTPUT must be .lcp or .lcp.zst (convert it to JSONL after)")
    longest = max(s for t in TYPES for s in t.system_tokens)
    if max_context <= longest + 2 * block_size:
        raise click.UsageError(f"--max-context {max_context} must exceed the longest system"
                               f" prompt ({longest} tokens) by two blocks")
    p = SynthParams(seed=seed, sessions=sessions, block_size=block_size, rate=rate,
                    branch=branch, max_context=max_context)
    s = write_synth(output, p, level=level)
    click.echo(f"wrote {s['output']}: {s['n_requests']:,} requests, {s['n_block_accesses']:,}"
               f" blocks, {s['n_unique_blocks']:,} unique, {s['n_sessions']:,} sessions,"
               f" {s['n_branches']:,} branches, {s['n_truncated']:,} truncated prompts")
