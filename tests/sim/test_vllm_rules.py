"""vLLM's block rules (shadow/sim/engine/rules.py) on ints and numpy arrays alike, at B = 32."""

from __future__ import annotations

import numpy as np

from shadow.sim.engine.rules import (blocks_held, computed_tokens, full_blocks, max_hit_blocks,
                                   partial_tail_blocks)

B = 32
TOKENS = [0, 1, 31, 32, 33, 63, 64, 65, 96]
#: by hand: (max hit, full blocks, blocks held) for each count above
WANT = [(0, 0, 0), (0, 0, 1), (0, 0, 1), (0, 1, 1), (1, 1, 2), (1, 1, 2), (1, 2, 2), (2, 2, 3),
        (2, 3, 3)]


def test_rules_by_hand():
    for n, (hit, full, held) in zip(TOKENS, WANT):
        assert (max_hit_blocks(n, B), full_blocks(n, B), blocks_held(n, B)) == (hit, full, held), n


def test_rules_on_arrays_equal_the_ints():
    a = np.asarray(TOKENS, dtype=np.int64)
    assert max_hit_blocks(a, B).tolist() == [w[0] for w in WANT]
    assert full_blocks(a, B).tolist() == [w[1] for w in WANT]
    assert blocks_held(a, B).tolist() == [w[2] for w in WANT]


def test_a_finished_request_holds_its_partial_block():
    # 40-token prompt, 30 output tokens: 69 computed (the last sampled one never is)
    n = computed_tokens(40, 30)
    assert n == 69 and partial_tail_blocks(n, full_blocks(n, B), B) == 1
    assert partial_tail_blocks(computed_tokens(40, 25), 2, B) == 0    # 64 computed: exact
    assert partial_tail_blocks(5, 3, 4) == 0                           # never negative
