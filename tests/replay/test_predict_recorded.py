"""``replay report --recording``: the prediction from the engine's own connector recording,
served with ``--timing recorded`` and paired with the replayed requests (hand-traced)."""

from __future__ import annotations

import pytest

from replay.predict import predict_recorded
from replay.results import RequestResult
from shadow.errors import ShadowError
from tests.sim.test_timing import B, _recording

# A: 9 tokens (blocks 1, 2 + a partial one), 4 out: block 3 cached at its release (1000 us).
# B: starts at 500 us while A runs: 17 tokens, looks up 1, 2, 3, 4: hits 1, 2 (3 comes later).
# R: 21 tokens at 600 us: another admission (a re-admission's input holds its output so far),
# which no replayed request of 21 prompt tokens claims.
RECORDS = [(0, 1000, 9, 4, [1, 2, 3]), (500, 2000, 17, 1, [1, 2, 3, 4]),
           (600, 700, 21, 1, [1, 2, 3, 4, 5])]


def _result(seq: int, prompt: int, sent: float) -> RequestResult:
    return RequestResult(index=seq, seq=seq, blocks=[], tail=prompt, prompt_tokens=prompt,
                         max_tokens=4, sent_s=sent, end_s=sent + 1, reached_engine=True)


def test_requests_take_their_admissions_in_order(tmp_path):
    rec = _recording(tmp_path / "r.lcp", RECORDS)
    results = [_result(0, 9, 0.0), _result(1, 17, 0.1), _result(2, 13, 0.2)]
    pred = predict_recorded(results, rec, block_size=B, num_gpu_blocks=65, policies=["lru"])
    assert pred.policies == ["vllm", "lru"] and pred.capacity_blocks == 64
    assert pred.cached == {0: {"vllm": 0, "lru": 0}, 1: {"vllm": 2 * B, "lru": 2 * B}}
    assert len(pred.result_lines) == 2      # request 2 (13 tokens) has no admission


def test_a_segment_directory_is_read_like_its_join(tmp_path):
    (tmp_path / "d").mkdir()
    _recording(tmp_path / "d" / "shadow-e0-dp0-20260101T000000Z-000000.lcp.zst", RECORDS)
    results = [_result(0, 9, 0.0), _result(1, 17, 0.1)]
    pred = predict_recorded(results, str(tmp_path / "d"), block_size=B, num_gpu_blocks=65,
                            policies=[])
    assert pred.cached == {0: {"vllm": 0}, 1: {"vllm": 2 * B}}


def test_a_recording_of_another_block_size_is_refused(tmp_path):
    rec = _recording(tmp_path / "r.lcp", RECORDS)
    with pytest.raises(ShadowError, match=r"the recording's block size is 4 tokens, the "
                                          r"engine's 16"):
        predict_recorded([], rec, block_size=16, num_gpu_blocks=65)


def test_replaying_a_recording_sends_a_preempted_request_once(tmp_path):
    """A connector recording's ``preempted`` records (an admission that ended in a preemption)
    are not requests of their own: replay sends each request once."""
    import numpy as np

    from replay.workload import load_requests
    from shadow.trace.segments import TYPE_NAMES
    from shadow.trace import Batch, LcpWriter
    from shadow.trace.format import RECORD_DTYPE

    rec = np.zeros(3, dtype=RECORD_DTYPE)
    rec["start_time_us"] = [0, 10, 20]
    rec["complete_time_us"] = [5, 30, 40]
    rec["input_length"] = [9, 9, 13]
    rec["output_length"] = [1, 2, 4]
    rec["type_id"] = [1, 0, 0]             # the first admission of request 1 was preempted
    blocks = [[1, 2], [1, 2, 3], [4, 5, 6]]
    rec["n_blocks"] = [len(b) for b in blocks]
    path = tmp_path / "r.lcp"
    with LcpWriter(str(path), block_size_tokens=B, type_names=TYPE_NAMES) as w:
        w.write_batch(Batch.from_lists(blocks, records=rec))
    _tbs, _tpb, specs = load_requests(str(path))
    assert [s.index for s in specs] == [1, 2]
    assert [s.trace_input_length for s in specs] == [9, 13]
