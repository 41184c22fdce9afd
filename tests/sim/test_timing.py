"""``shadow simulate --timing recorded``: a recording served in the order of its start and
completion times through the live path (shadow/sim/timing/run.py), against hand-traced outcomes and
the serial replay."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from shadow.cli import cli
from shadow.sim.registry import policy_specs
from shadow.trace import Batch, LcpWriter
from shadow.trace.format import RECORD_DTYPE
from tests.tiers import unit_rows

B = 4   # tokens per block


def _recording(path, reqs: list[tuple[int, int, int, int, list[int]]]) -> str:
    """Write (start us, complete us, input tokens, output tokens, blocks) requests as an lcp
    trace with block size B, in completion order."""
    reqs = sorted(reqs, key=lambda r: r[1])
    rec = np.zeros(len(reqs), dtype=RECORD_DTYPE)
    for f in ("chat_id", "parent_chat_id", "session_id", "session_next_req"):
        rec[f] = -1
    rec["start_time_us"] = [r[0] for r in reqs]
    rec["complete_time_us"] = [r[1] for r in reqs]
    rec["input_length"] = [r[2] for r in reqs]
    rec["output_length"] = [r[3] for r in reqs]
    rec["n_blocks"] = [len(r[4]) for r in reqs]
    batch = Batch.from_lists([r[4] for r in reqs], records=rec)
    with LcpWriter(str(path), block_size_tokens=B) as w:
        w.write_batch(batch)
    return str(path)


def _simulate(trace: str, *args: str) -> tuple[int, str, dict[tuple[str, int], dict[str, str]]]:
    r = CliRunner().invoke(cli, ["simulate", "-t", trace, *args], catch_exceptions=False)
    results = {}
    for line in r.output.splitlines():
        if line.startswith("RESULT "):
            kv = dict(x.split("=", 1) for x in line.split()[1:])
            results[(kv["algo"], int(kv["cache_size"]))] = kv
    return r.exit_code, r.output, results


# A: prompt blocks 1, 2 (9 tokens: 2 full + a partial one), 4 tokens out -> 12 computed: block 3
# cached at its completion.  B: starts while A runs, prompt 1, 2, 3, 4 (17 tokens).
OVERLAP = [(0, 1000, 9, 4, [1, 2, 3]), (500, 2000, 17, 1, [1, 2, 3, 4])]


def test_a_request_started_while_another_runs_misses_its_generated_block(tmp_path):
    trace = _recording(tmp_path / "t.lcp", OVERLAP)
    rc, out, timed = _simulate(trace, "-c", "64", "-a", "lru,vllm", "--timing", "recorded")
    assert rc == 0, out
    _, _, serial = _simulate(trace, "-c", "64", "-a", "lru,vllm", "--lookup", "vllm")
    for algo in ("lru", "vllm"):
        # looked up: A (9 - 1) // 4 = 2 blocks, B (17 - 1) // 4 = 4 blocks
        assert timed[(algo, 64)]["n_blocks"] == serial[(algo, 64)]["n_blocks"] == "6"
        # serial: A is done (3 cached) before B looks up 1, 2, 3; recorded: 3 comes at 1000 us
        assert float(serial[(algo, 64)]["block_hit_ratio"]) == pytest.approx(3 / 6)
        assert float(timed[(algo, 64)]["block_hit_ratio"]) == pytest.approx(2 / 6)


def test_held_blocks_make_a_concurrent_request_skip(tmp_path):
    # two running requests hold 3 + 3 slots of a 5-block cache: the second cannot be admitted
    trace = _recording(tmp_path / "t.lcp", [(0, 1000, 9, 1, [1, 2]), (10, 900, 9, 1, [7, 8])])
    _, out, timed = _simulate(trace, "-c", "5", "-a", "lru", "--timing", "recorded")
    assert timed[("lru", 5)]["n_req_skipped"] == "1", out
    _, _, serial = _simulate(trace, "-c", "5", "-a", "lru", "--lookup", "vllm")
    assert serial[("lru", 5)]["n_req_skipped"] == "0"


def _sequential(n: int, seed: int) -> list[tuple[int, int, int, int, list[int]]]:
    """Requests one after another (each starts after the previous completed), shared prefixes."""
    rng = np.random.default_rng(seed)
    out, t, nxt = [], 0, 100
    for _ in range(n):
        k = int(rng.integers(1, 6))
        prefix = list(range(1, 1 + int(rng.integers(0, 4))))
        gen = list(range(nxt, nxt + int(rng.integers(0, 3))))
        nxt += len(gen) + 1
        blocks = prefix + list(range(nxt, nxt + k)) + gen
        nxt += k
        n_prompt = len(blocks) - len(gen)
        inp = n_prompt * B + int(rng.integers(1, B))        # a partial last prompt block
        outp = len(gen) * B + 1
        out.append((t, t + 100, inp, outp, blocks))
        t += 200
    return out


def test_sequential_recording_equals_the_serial_replay_for_vllm(tmp_path):
    """No overlap: the engine's own order is the file's, so `vllm` (whose recency is release
    order) gives the serial replay's figures under --lookup vllm, at every size that holds the
    largest request (11 blocks with its partial one; a smaller cache skips requests serially that
    the live path admits: an admission holds the prompt, the generated blocks come later)."""
    trace = _recording(tmp_path / "t.lcp", _sequential(200, 1))
    args = ["-c", "11,12,16,24,64", "-a", "vllm"]
    _, out, timed = _simulate(trace, *args, "--timing", "recorded")
    _, _, serial = _simulate(trace, *args, "--lookup", "vllm")
    assert timed and set(timed) == set(serial), out
    for key in serial:
        for f in ("n_req", "n_req_skipped", "n_blocks", "block_hit_ratio", "prefix_hit_ratio",
                  "n_eviction"):
            assert timed[key][f] == serial[key][f], (key, f)


def test_every_online_policy_runs(tmp_path):
    trace = _recording(tmp_path / "t.lcp", _sequential(60, 2) + [(50, 12000, 9, 1, [1, 2])])
    online = [n for n, s in policy_specs().items() if not s.needs_future]
    rc, out, timed = _simulate(trace, "-c", "8", "-a", ",".join(online), "--timing", "recorded")
    assert rc == 0, out
    assert {a for a, _ in timed} == set(online)


@pytest.mark.slow
@pytest.mark.parametrize("reqs,args,words", [
    (OVERLAP, ["-a", "belady"], r"--timing recorded cannot run belady"),
    (OVERLAP, ["-a", "lru", "--lookup", "prompt"], r"--timing recorded uses vLLM's block rules"),
    ([(-1, 1000, 9, 1, [1, 2])], ["-a", "lru"],
     r"t.lcp: request 0 has start time -1 us and completion time 1000 us: --timing recorded "
     r"needs both"),
])
def test_refused_in_one_line(tmp_path, reqs, args, words):
    trace = _recording(tmp_path / "t.lcp", reqs)
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-t", trace, "-c", "8", *args,
                        "--timing", "recorded", "-o", str(tmp_path / "out.txt")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and re.search(words, r.stderr), r.stderr
    assert not (tmp_path / "out.txt").exists()


def _overlapping(n: int, seed: int) -> list[tuple[int, int, int, int, list[int]]]:
    """Requests that overlap in time (each runs 3-30 start intervals), shared prefixes."""
    rng = np.random.default_rng(seed)
    reqs = _sequential(n, seed)
    return [(t0 // 10, t0 // 10 + int(rng.integers(30, 300)), inp, outp, blocks)
            for t0, _t1, inp, outp, blocks in reqs]


def test_batches_of_any_size_give_the_same_figures(tmp_path, monkeypatch):
    """Events cut into batches of 3 (releases of admissions from earlier batches everywhere)
    give what one batch gives."""
    import shadow.sim.timing.run as timing
    trace = _recording(tmp_path / "t.lcp", _overlapping(300, 3))
    args = ["-c", "8,16,64", "-a", "lru,vllm,s3fifo,arc,random", "--timing", "recorded"]
    _, out, whole = _simulate(trace, *args)
    monkeypatch.setattr(timing, "BATCH_EVENTS", 3)
    _, _, cut = _simulate(trace, *args)
    assert whole and whole == cut, out
    assert any(int(r["n_req_skipped"]) for r in whole.values())   # held room at 8 blocks


def test_equals_admit_and_release_one_at_a_time(tmp_path):
    """The vectorised event batches against the plain live API, one event at a time, in the
    documented order and with the documented block rules."""
    from shadow.sim import CacheSpec, Simulator
    from shadow.sim.engine.rules import (blocks_held, computed_tokens, full_blocks,
                                       max_hit_blocks, partial_tail_blocks)
    reqs = sorted(_overlapping(200, 4), key=lambda q: q[1])
    trace = _recording(tmp_path / "t.lcp", reqs)
    _, out, timed = _simulate(trace, "-c", "8,16", "-a", "lru,arc", "--timing", "recorded")
    sim = Simulator([CacheSpec(a, c) for c in (8, 16) for a in ("lru", "arc")], verify=True)
    events = sorted([(q[1], 0, i) for i, q in enumerate(reqs)] +
                    [(q[0], 1, i) for i, q in enumerate(reqs)])
    adms = {}
    for _t, kind, i in events:
        _s, _d, inp, outp, blocks = reqs[i]
        n_prompt = min(full_blocks(inp, B), len(blocks))
        if kind == 1:
            adms[i] = sim.admit(blocks[:n_prompt], min(max_hit_blocks(inp, B), n_prompt),
                                blocks_held(inp, B) - full_blocks(inp, B))
        else:
            n_comp = computed_tokens(inp, max(outp, 1))
            n_full = min(full_blocks(n_comp, B), len(blocks))
            sim.release(adms.pop(i), blocks[n_prompt:n_full],
                        partial_tail_blocks(n_comp, max(n_full, n_prompt), B))
    for r in sim.results():
        got = timed[(r.spec.policy, r.spec.capacity)]
        assert (int(got["n_req"]), int(got["n_req_skipped"]), int(got["n_blocks"]),
                int(got["n_eviction"])) == (r.n_req, r.n_req_skipped, r.n_blocks, r.n_eviction)
        assert float(got["block_hit_ratio"]) == pytest.approx(r.block_hit_ratio, abs=1e-6), out


# --timing model: a trace of arrivals served with the service model's start and completion times
# (shadow/sim/timing/service.py), hand-computed.

def _arrivals(path, reqs: list[tuple[int, int, int, list[int]]]) -> str:
    """(arrival us, input tokens, output tokens, blocks): a converted trace's shape, the arrival
    in complete_time_us (Mooncake's `timestamp`) and no start time."""
    return _recording(path, [(-1, t, inp, outp, blocks) for t, inp, outp, blocks in reqs])


def test_service_schedule_queues_at_the_concurrency_limit():
    from shadow.sim.timing.service import parse_service
    m = parse_service("prefill=1000,decode=100,concurrency=2")
    # durations: 1000 tokens in -> 1 s prefill; 50 out -> 0.5 s decode; 1.5 s = 1,500,000 us
    arrival = np.array([0, 100, 200, 5_000_000, 1_499_999])
    inp = np.array([1000, 1000, 500, 1000, 0])
    out = np.array([50, 50, 0, 100, 1])
    start, done = m.schedule(arrival, inp, out)
    # A (0) and B (100) start at arrival; C (200) waits for A (done 1.5 s); E (1,499,999) waits
    # for B (done 1,500,100); D (5 s) finds a free slot
    c_dur = 500_000 + 10_000                     # 500 tokens + max(0, 1) = 1 decode token
    assert done.tolist()[:2] == [1_500_000, 1_500_100]
    assert start.tolist() == [0, 100, 1_500_000, 5_000_000, 1_500_100]
    assert done.tolist()[2:] == [1_500_000 + c_dur, 5_000_000 + 2_000_000, 1_500_100 + 10_000]


def test_service_fit_takes_the_prefill_model(tmp_path):
    import json
    from shadow.sim.timing.service import parse_service
    rep = tmp_path / "report.json"
    rep.write_text(json.dumps({"prefill_model": {"coef": [0.01, 0.0005, 2e-7]}}))
    m = parse_service(f"fit:{rep},decode=20,concurrency=3")
    assert (m.concurrency, m.decode, m.a, m.d) == (3, 20.0, 0.01, 2e-7)
    assert m.prefill == pytest.approx(2000.0)
    # 400 tokens: 0.01 + 400 * 0.0005 + 2e-7 * 400 * 400 / 2 = 0.226 s; 10 out at 20/s: 0.5 s
    start, done = m.schedule(np.array([7]), np.array([400]), np.array([10]))
    assert (int(start[0]), int(done[0])) == (7, 7 + 726_000)


def test_model_timing_serves_as_recorded_at_the_modelled_times(tmp_path):
    """Prefill 4 tokens/ms (B = 4: a block per ms), decode 1 token/ms, one at a time: A (9
    tokens, 4 out) runs 0..6.25 ms; B arrives at 1 ms and starts when A completes, after A's
    generated block 3 is in, so it hits 1, 2, 3 as the serial replay does; with room for both,
    B starts at 1 ms and misses block 3 (as OVERLAP under --timing recorded)."""
    trace = _arrivals(tmp_path / "t.lcp", [(0, 9, 4, [1, 2, 3]), (1000, 17, 1, [1, 2, 3, 4])])
    svc = "prefill=4000,decode=1000,concurrency={}"
    for conc, hit in ((1, 3 / 6), (2, 2 / 6)):
        rc, out, res = _simulate(trace, "-c", "64", "-a", "lru,vllm", "--timing", "model",
                                 "--service", svc.format(conc))
        assert rc == 0, out
        for algo in ("lru", "vllm"):
            assert res[(algo, 64)]["n_blocks"] == "6"
            assert float(res[(algo, 64)]["block_hit_ratio"]) == pytest.approx(hit), (conc, algo)


def test_model_timing_equals_recorded_on_the_modelled_times(tmp_path):
    """--timing model is --timing recorded on a recording carrying the model's times."""
    from shadow.sim.timing.service import parse_service
    reqs = _overlapping(200, 5)
    arrivals = [(t0, inp, outp, blocks) for t0, _t1, inp, outp, blocks in reqs]
    trace = _arrivals(tmp_path / "a.lcp", arrivals)
    svc = "prefill=2000,decode=50,concurrency=3"
    start, done = parse_service(svc).schedule(np.array([a[0] for a in arrivals]),
                                              np.array([a[1] for a in arrivals]),
                                              np.array([a[2] for a in arrivals]))
    rec = _recording(tmp_path / "r.lcp", [(int(s), int(d), *a[1:]) for s, d, a in
                                          zip(start, done, arrivals)])
    args = ["-c", "8,16,64", "-a", "lru,vllm,s3fifo,arc"]
    _, out, modelled = _simulate(trace, *args, "--timing", "model", "--service", svc)
    _, _, recorded = _simulate(rec, *args, "--timing", "recorded")
    assert modelled and modelled == {k: {**v, "trace": modelled[k]["trace"]}
                                     for k, v in recorded.items()}, out


@pytest.mark.parametrize("service,words", unit_rows([
    ("prefill=0", r"--service: prefill must be a positive number, got '0'"),
    ("decode=fast", r"--service: decode must be a positive number, got 'fast'"),
    ("concurrency=2.5", r"--service: concurrency must be a positive integer, got '2.5'"),
    ("concurrency=0", r"--service: concurrency must be a positive integer"),
    ("prefill=nan", r"--service: prefill must be a positive number"),
    ("speed=3", r"--service: unknown parameter 'speed=3'"),
    ("decode=3,decode=4", r"--service: decode given twice"),
    ("fit:/nonexistent/report.json", r"--service fit:/nonexistent/report.json: cannot read"),
    ("fit:{bad},decode=2", r"the fitted prefill model has a negative or non-finite term"),
    ("fit:{none}", r"the report has no fitted prefill model"),
    ("fit:{bad},prefill=100", r"prefill and fit: both set the prefill speed"),
], 6))
def test_bad_service_refused_in_one_line(tmp_path, service, words):
    import json
    (tmp_path / "bad.json").write_text(json.dumps({"prefill_model": {"coef": [0.1, -0.001]}}))
    (tmp_path / "none.json").write_text(json.dumps({"prefill_model": None}))
    service = service.format(bad=tmp_path / "bad.json", none=tmp_path / "none.json")
    trace = _arrivals(tmp_path / "t.lcp", [(0, 9, 4, [1, 2, 3])])
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-t", trace, "-c", "8",
                        "-a", "lru", "--timing", "model", "--service", service,
                        "-o", str(tmp_path / "out.txt")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and re.search(words, r.stderr), r.stderr
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.slow
def test_service_outside_timing_model_is_refused(tmp_path):
    trace = _arrivals(tmp_path / "t.lcp", [(0, 9, 4, [1, 2, 3])])
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-t", trace, "-c", "8",
                        "-a", "lru", "--service", "decode=3"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "--service is --timing model's, not --timing serial's" in r.stderr


def test_times_past_2_to_the_60_sort_the_same(tmp_path):
    """The key sort (time * 4 + kind) gives way to a lexsort where time * 4 could overflow:
    the same order, the same figures."""
    reqs = _overlapping(150, 8)
    shift = 1 << 61
    far = [(s + shift, d + shift, *rest) for s, d, *rest in reqs]
    args = ["-c", "8,16", "-a", "lru,arc", "--timing", "recorded"]
    _, out, near = _simulate(_recording(tmp_path / "n.lcp", reqs), *args)
    _, _, moved = _simulate(_recording(tmp_path / "f.lcp", far), *args)
    strip = lambda d: {k: {f: v for f, v in r.items() if f != "trace"} for k, r in d.items()}  # noqa: E731
    assert near and strip(near) == strip(moved), out
