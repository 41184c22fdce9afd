"""``--lookup all|prompt|vllm`` (and ``Simulator(lookup=)``) on a hand-made recorded trace.

A recorded request holds its prompt blocks, then its generated-token blocks; ``input_length``
says where the prompt ends (block size B = 16 tokens here).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from shadow.cli import cli
from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache
from shadow.sim.engine.rules import lookup_counts, vllm_anonymous_counts
from shadow.trace.batch import Batch
from shadow.trace.format import RECORD_DTYPE
from tests.sim._traces import random_trace

B = 16
# (input_length, blocks): prompt blocks then generated blocks
RECORDED = [
    (40, [1, 2, 3, 4, 5]),        # prompt 3 blocks (2 full + 8 tokens), 2 generated
    (48, [1, 2, 3, 6]),           # prompt exactly 3 blocks, 1 generated
    (80, [1, 2, 3, 4, 5, 7]),     # a follow-up turn: prompt = the first turn + its output
    (0, [8]),                     # nothing of the prompt: nothing looked up
]
# looked up per request: all = every block; prompt = input_length // B; vllm = (input_length-1)//B
EXPECT = {
    "all": ([5, 4, 6, 1], 16, 0 + 3 + 5 + 0),
    "prompt": ([2, 3, 5, 0], 10, 0 + 3 + 5 + 0),
    "vllm": ([2, 2, 4, 0], 8, 0 + 2 + 4 + 0),
}


def _records(inputs, lengths, outputs=None):
    rec = np.zeros(len(inputs), dtype=RECORD_DTYPE)
    for f in ("start_time_us", "complete_time_us", "chat_id", "parent_chat_id", "session_id",
              "session_next_req"):
        rec[f] = -1
    rec["input_length"] = inputs
    rec["n_blocks"] = lengths
    if outputs is not None:
        rec["output_length"] = outputs
    return rec


def _batch():
    reqs = [b for _, b in RECORDED]
    return Batch.from_lists(reqs, records=_records([i for i, _ in RECORDED], [len(r) for r in reqs]))


@pytest.mark.parametrize("mode", ["all", "prompt", "vllm"])
def test_lookup_counts(mode):
    b = _batch()
    got = lookup_counts(b.records, np.diff(b.offsets), mode, B)
    assert (got is None) if mode == "all" else (got.tolist() == EXPECT[mode][0])


@pytest.mark.parametrize("mode", ["all", "prompt", "vllm"])
def test_simulator_lookup_statistics(mode):
    sim = Simulator([CacheSpec("lru", 64)], lookup=mode, block_size_tokens=B)
    sim.feed(_batch())
    r = sim.results()[0]
    assert (r.n_blocks, r.n_hits) == EXPECT[mode][1:]
    assert r.hole_len_sum == r.n_blocks - r.n_hits
    # every block of the trace is resident, looked up or not
    assert sorted(sim.runs[0].policy.resident_ids()) == list(range(1, 9))


def test_unlooked_blocks_take_capacity_and_pins():
    # 5 slots: request 0 fills them all (2 looked up, 3 only inserted); request 1's missing block 6
    # must evict one, and with pinning its looked-up hits 1, 2, 3 are not candidates.
    sim = Simulator([CacheSpec("lru", 5)], lookup="prompt", block_size_tokens=B)
    sim.feed(_batch())
    r = sim.results()[0]
    assert sim.runs[0].policy.n_resident <= 5
    assert r.n_eviction >= 1 and r.n_self_eviction == 0 and r.error is None


def test_lookup_needs_block_size():
    with pytest.raises(ShadowError, match="block size"):
        Simulator([CacheSpec("lru", 8)], lookup="prompt")
    with pytest.raises(ShadowError, match="lookup mode"):
        Simulator([CacheSpec("lru", 8)], lookup="some")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", ["lru", "clock", "s3fifo", "vllm"])
def test_partial_lookup_same_as_reference_loop(name, seed):
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, 150, n_roots=3, max_len=10, n_raw=4)
    lengths = [len(r) for r in trace]
    inputs = [int(rng.integers(0, B * n + 1)) for n in lengths]
    # up to 2 blocks of output beyond the recorded blocks: 0-2 anonymous slots under ``vllm``
    outputs = [int(rng.integers(0, B * (n + 2) - i + 1)) for n, i in zip(lengths, inputs)]
    records = _records(inputs, lengths, outputs)
    anonymous = vllm_anonymous_counts(records, np.array(lengths), B)
    assert anonymous.max() == 2 and anonymous.min() == 0
    for mode in ("prompt", "vllm"):
        for cap in (6, 17):
            sim = Simulator([CacheSpec(name, cap)], lookup=mode, block_size_tokens=B,
                            cost_model="position")
            sim.feed(Batch.from_lists(trace, records=records))
            ref = RefCache(make_reference(name, cap), cap, cost_model="position")
            k = lookup_counts(records, np.array(lengths), mode, B)
            for req, m, a in zip(trace, k, anonymous):
                ref.serve(req, n_match=int(m), n_anonymous=int(a) if mode == "vllm" else 0)
            got = sim.results()[0]
            want = ref.stats()
            for key in ("n_req", "n_blocks", "n_hits", "n_prefix_hits", "n_eviction",
                        "n_self_eviction", "n_unexpected_eviction"):
                assert getattr(got, key) == want[key], (key, mode, cap)
            assert got.saved_cost == pytest.approx(want["saved_cost"])


def _write_recorded(path):
    from shadow.trace.writer import LcpWriter

    with LcpWriter(str(path), block_size_tokens=B) as w:
        for inp, blocks in RECORDED:
            w.write_request({"input_length": inp, "n_blocks": len(blocks)}, blocks)


@pytest.mark.parametrize("mode", ["all", "prompt", "vllm"])
def test_cli_lookup(tmp_path, mode):
    path = tmp_path / "recorded.lcp"
    _write_recorded(path)
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(path), "-c", "64", "--algo", "lru",
                                 "--lookup", mode], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("RESULT"))
    kv = dict(p.split("=", 1) for p in line.split()[1:])
    n_blocks, n_hits = EXPECT[mode][1:]
    assert int(kv["n_blocks"]) == n_blocks
    assert float(kv["block_hit_ratio"]) == pytest.approx(n_hits / n_blocks, abs=1e-6)


@pytest.mark.slow
def test_cli_lookup_without_block_size_is_one_line_error(tmp_path):
    from shadow.trace.writer import LcpWriter

    path = tmp_path / "nobs.lcp"
    with LcpWriter(str(path)) as w:
        w.write_request({"input_length": 16, "n_blocks": 1}, [1])
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "--trace", str(path), "-c", "8",
                        "--algo", "lru", "--lookup", "prompt"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "block size" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_help_mentions_lookup_and_threads():
    r = CliRunner().invoke(cli, ["simulate", "--help"])
    assert "--lookup" in r.output and "--threads" in r.output


def test_vllm_anonymous_counts():
    # (input_length, output_length, recorded blocks) -> slots held beyond them, B = 16
    cases = [
        ((40, 1, 2), 1),    # 40 computed tokens: 2 full blocks + the partial third
        ((48, 1, 3), 0),    # 48 computed: exactly 3 blocks
        ((48, 2, 3), 1),    # 49 computed: the first generated token opens a fourth block
        ((40, 9, 3), 0),    # 48 computed: the prompt's partial block filled up and was recorded
        ((0, 0, 0), 0),     # nothing computed
        ((100, 50, 7), 3),  # a converted trace naming only the prompt's 7 blocks: 149 computed
    ]
    rec = _records([c[0][0] for c in cases], [c[0][2] for c in cases], [c[0][1] for c in cases])
    got = vllm_anonymous_counts(rec, np.array([c[0][2] for c in cases]), B)
    assert got.tolist() == [c[1] for c in cases]


def _recorded_workload(rng, n_requests: int):
    """Requests as the connector records them: full prompt blocks, then full generated blocks.

    Conversations grow turn by turn (a turn's prompt = the last prompt + its output + new
    tokens, until it passes 4 blocks and starts over) and all share a 2-block system prompt; ids
    intern (parent id, block tokens).  A request has at most 9 blocks and 1 anonymous slot.
    """
    intern: dict = {}
    system = [int(x) for x in rng.integers(0, 1000, 2 * B)]
    convs: dict[int, list[int]] = {}
    out = []
    for _ in range(n_requests):
        c = int(rng.integers(0, 6))
        prompt = convs.get(c, system) + [int(x) for x in rng.integers(0, 1000, int(rng.integers(1, 3 * B)))]
        gen = [int(x) for x in rng.integers(0, 1000, int(rng.integers(1, 2 * B)))]
        convs[c] = prompt + gen if len(prompt) + len(gen) <= 4 * B else system
        computed = prompt + gen[:-1]          # the last sampled token is never computed
        ids, parent = [], 0
        for i in range(len(computed) // B):
            parent = intern.setdefault((parent, tuple(computed[i * B:(i + 1) * B])), len(intern) + 1)
            ids.append(parent)
        out.append((len(prompt), len(gen), ids))
    return out


@pytest.mark.parametrize("cap", [12, 16, 30])
def test_offline_vllm_lookup_equals_live_replay(cap):
    """``--lookup vllm`` offline (whole requests, the final partial block as an anonymous slot)
    gives the live shadow's results on a sequential recording: the live path admits the prompt
    and releases the generated blocks holding the partial block, as the connector does (and as
    tests/connector/test_fidelity.py checks against a real engine).

    NOTE: exact for the ``vllm`` policy, whose order is set at release (tail first); a recency
    policy such as lru sees the generated blocks accessed with the prompt offline but inserted
    after it live, so its order within a request (not its hits here) can differ.
    """
    name = "vllm"
    work = _recorded_workload(np.random.default_rng(cap), 120)
    live = Simulator([CacheSpec(name, cap)], pin=True, verify=False)
    prefix_hits = hits = 0
    for n, m, ids in work:
        n_prompt = min(len(ids), n // B)
        adm = live.admit(ids[:n_prompt], n_match=max(n - 1, 0) // B, n_anonymous=1 if n % B else 0)
        prefix_hits += adm.prefix_hits[0]
        hits += adm.hits[0]
        computed_blocks = -(-(n + m - 1) // B)
        live.release(adm, ids[n_prompt:], n_anonymous_final=max(0, computed_blocks - len(ids)))
    offline = Simulator([CacheSpec(name, cap)], pin=True, verify=False, lookup="vllm",
                        block_size_tokens=B)
    offline.feed(Batch.from_lists([w[2] for w in work],
                                  records=_records([w[0] for w in work], [len(w[2]) for w in work],
                                                   [w[1] for w in work])))
    r = offline.results()[0]
    assert r.n_req == len(work) and r.n_eviction > 0
    assert (r.n_prefix_hits, r.n_hits) == (prefix_hits, hits)
    assert sorted(offline.runs[0].policy.resident_ids()) == sorted(live.runs[0].policy.resident_ids())
