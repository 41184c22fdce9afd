"""A live shadow cache that stops (out of memory) stops alone, and says so.

Through the real worker, interner and Simulator: the engine has run long enough that the
interner's ids (which only grow) pass 2**31 - 1, so each shadow cache widens its slot ids to 64
bits when the next new block arrives: 32 MiB for a 4M-slot cache, with no memory left for it (a
real ``RLIMIT_AS`` in a child process, tests/oom_support.py).  That cache stops: its stopped
state turns 1 in the worker's snapshot (``shadow_cache_stopped``), its counters (tokens
included) freeze and it leaves the prediction log, the log says why once; the small cache and the worker go on; a prefix-cache reset starts it afresh.
"""

from __future__ import annotations

import pytest

from shadow.connector.schema import stopped_delta
from tests.oom_support import run_child

_CHILD = r'''
import logging, sys
from tests.oom_support import fix_mmap_threshold, relax, result, squeeze

fix_mmap_threshold()

from shadow.connector.config import parse_extra_config
from shadow.connector.schema import CACHE_FIELDS
from shadow.connector.worker import Admit, Release, Reset, ShadowWorker

logs = []


class Keep(logging.Handler):
    def emit(self, record):
        logs.append(record.getMessage())


logging.getLogger("shadow").addHandler(Keep())
B = 4
cfg = parse_extra_config({"policies": ["lru"], "capacity_factors": [],
                          "capacities": [64, 4 << 20]}, block_size=B, engine_blocks=64)
w = ShadowWorker(cfg, start=False)


def request(rid, names):
    hashes = [f"h:{n}".encode() for n in names]
    w.submit(Admit(rid, hashes, len(names) * B, 0, False, 1.0))
    w.submit_control(Release(rid, [], 1, 2.0, len(names) * B, 0))
    assert w.flush()


def state():
    snap = w.snapshot
    requests = CACHE_FIELDS.index("requests")
    return {"stopped": list(snap.stopped), "requests": [r[requests] for r in snap.caches],
            "hits": [r[CACHE_FIELDS.index("block_hits")] for r in snap.caches],
            "query_tokens": [r[CACHE_FIELDS.index("query_tokens")] for r in snap.caches],
            "errors": snap.worker[2]}


request("a", ["p1", "p2", "p3"])
out = {"before": state()}
# NOTE: stands for about 2**31 distinct blocks seen over days: the next new hash gets id 2**31
w.interner._next_id = 2**31
prev = w.snapshot.stopped
saved = squeeze()
request("b", ["p1", "p2", "x"])
relax(saved)
out["after_failure"] = state()
out["keys"], out["prev"] = list(w.keys), list(prev)
request("c", ["p1", "p2"])
request("d", ["p1", "q"])
out["later"] = state()
w.submit_control(Reset())
request("e", ["p1", "p2"])
out["after_reset"] = state()
out["predicted"] = {p.request_id: sorted(p.prefix_hit_tokens) for p in w.predictions}
out["predicted_hits"] = {p.request_id: p.hit_blocks for p in w.predictions}
w.stop()
out["logs"] = [m for m in logs if "out of memory" in m]
result(out)
'''


@pytest.mark.slow
def test_a_cache_out_of_memory_stops_alone_and_shows_as_stopped():
    out = run_child(_CHILD, {})
    # caches in key order: lru|64, lru|4194304 (the big one)
    assert out["before"] == {"stopped": [0, 0], "requests": [1, 1], "hits": [0, 0],
                             "query_tokens": [12, 12], "errors": 0}
    failed = out["after_failure"]
    assert failed["stopped"] == [0, 1]
    # what the next stats payload carries: only the change
    assert stopped_delta(out["keys"], tuple(failed["stopped"]), tuple(out["prev"])) == {
        "lru|4194304": 1}
    # the big cache counts the request it could not finish (its figures stop there); the
    # small one served it whole (p1, p2 hit)
    assert failed["requests"] == [2, 2] and failed["hits"] == [2, 2]
    assert failed["query_tokens"] == [24, 24]   # tokens follow the requests counted
    assert failed["errors"] == 0            # nothing raised: the worker never saw an exception
    later = out["later"]
    assert later["stopped"] == [0, 1]
    assert later["requests"] == [4, 2]      # counting on / frozen
    assert later["query_tokens"] == [40, 24]
    # c and d look up one block each (p1): vLLM's match leaves out a whole last block
    assert later["hits"] == [2 + 1 + 1, 2]
    assert out["after_reset"]["stopped"] == [0, 0]
    assert out["after_reset"]["requests"] == [5, 3]   # counters carry over a reset
    assert out["after_reset"]["query_tokens"] == [48, 32]
    # the prediction log lists a cache only for the requests it counted: not the stopped one
    # for c and d (its 0 would read as a predicted miss)
    both = ["lru|4194304", "lru|64"]
    assert out["predicted"] == {"a": both, "b": both, "c": ["lru|64"], "d": ["lru|64"],
                                "e": both}
    assert out["predicted_hits"]["c"] == {"lru|64": 1}
    assert len(out["logs"]) == 1 and "lru cache 4194304" in out["logs"][0]
    assert "request 1 needed" in out["logs"][0]
