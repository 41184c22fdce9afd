"""Block keys (shadow.connector.blockkey) against vLLM's own block hasher: on vLLM 0.32's
``Request`` objects hashed by ``get_request_block_hasher`` (no engine), two blocks get one key
exactly when they get one vLLM hash, over tokens, parents, LoRA adapters, multimodal items,
cache salts and their combinations; keys do not depend on PYTHONHASHSEED (vLLM's hashes do)
nor on the hash algorithm; another fleet key gives other keys.  The same on real engines:
tests/connector/test_fleet_live.py."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from shadow.connector.blockkey import BlockKeys, block_key, canonical, derive_key, private_keys
from tests.vllm_support import REPO_ROOT, vllm_available

B = 32


def test_canonical_is_unambiguous():
    values = [None, True, False, 0, 1, -1, "", "a", "ab", b"ab", ("a", "b"), ("ab",),
              (("a",), "b"), ("a", ("b",)), [1, 2], (1, 2), 1.5, ("lora", "x", ""),
              ("lora", "x", None), ("mm", "id", 0), ("mm", "id", 32), "1", b"1"]
    enc = [canonical(v) for v in values]
    pairs = [(a, b) for (a, ea), (b, eb) in itertools.combinations(zip(values, enc), 2)
             if ea == eb and not (a == b and type(a) is type(b))]
    # NOTE: a tuple and a list of the same items encode alike (vLLM's keys are tuples)
    assert pairs == [([1, 2], (1, 2))], pairs
    with pytest.raises(TypeError, match="extra key of type object"):
        canonical((object(),))


def test_keys_depend_on_the_fleet_key_parent_tokens_and_extra_keys():
    k1, k2 = derive_key("fleet one"), derive_key("fleet two")
    toks = list(range(B))
    base = block_key(k1, 0, toks, None)
    assert block_key(k1, 0, toks, None) == base and 1 <= base < 1 << 63
    others = [block_key(k2, 0, toks, None), block_key(k1, 5, toks, None),
              block_key(k1, 0, toks[:-1] + [999], None), block_key(k1, 0, toks, ()),
              block_key(k1, 0, toks, (("cache_salt", "s"),))]
    assert len({base, *others}) == 1 + len(others)
    assert private_keys(k1, b"a", [1, 2]) != private_keys(k1, b"b", [1, 2])


_SEED_CHILD = r"""
import json, sys
from shadow.connector.blockkey import derive_key, block_key
k = derive_key("fleet")
print(json.dumps([block_key(k, 0, list(range(32)), (("lora", "a", "/p"), ("cache_salt", "s"))),
                  block_key(k, 7, [5] * 32, (("mm", "img", 3),))]))
"""


def test_keys_do_not_depend_on_pythonhashseed():
    out = set()
    for seed in ("0", "1", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(REPO_ROOT))
        r = subprocess.run([sys.executable, "-c", _SEED_CHILD], capture_output=True, text=True,
                           env=env, check=True)
        out.add(tuple(json.loads(r.stdout)))
    assert len(out) == 1


# -- against vLLM's hasher -------------------------------------------------------------------

vllm_only = pytest.mark.skipif(not vllm_available(), reason="vllm not installed")


def _requests():
    """vLLM Requests that share and do not share prefixes under every kind of extra key."""
    from vllm import SamplingParams
    from vllm.lora.request import LoRARequest
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.v1.request import Request

    sp = SamplingParams(max_tokens=1)
    sys_p = list(range(10, 10 + 2 * B))          # two shared blocks
    tail_a = list(range(500, 500 + 2 * B))
    tail_b = list(range(600, 600 + B))
    lora_a = LoRARequest("a", 1, "/adapters/a")
    lora_a2 = LoRARequest("a", 2, "/adapters/a-v2")   # one name, another adapter
    lora_b = LoRARequest("b", 3, "/adapters/b")

    def mm(ident: str, offset: int, length: int) -> MultiModalFeatureSpec:
        return MultiModalFeatureSpec(data=None, modality="image", identifier=ident,
                                     mm_position=PlaceholderRange(offset=offset, length=length))

    specs = {
        "plain": dict(prompt_token_ids=sys_p + tail_a),
        "plain again": dict(prompt_token_ids=sys_p + tail_a + tail_b),
        "other tail": dict(prompt_token_ids=sys_p + tail_b),
        "salt s": dict(prompt_token_ids=sys_p + tail_a, cache_salt="s"),
        "salt s again": dict(prompt_token_ids=sys_p + tail_b, cache_salt="s"),
        "salt t": dict(prompt_token_ids=sys_p + tail_a, cache_salt="t"),
        "lora a": dict(prompt_token_ids=sys_p + tail_a, lora_request=lora_a),
        "lora a v2": dict(prompt_token_ids=sys_p + tail_a, lora_request=lora_a2),
        "lora b": dict(prompt_token_ids=sys_p + tail_a, lora_request=lora_b),
        "lora a salt s": dict(prompt_token_ids=sys_p + tail_a, lora_request=lora_a,
                              cache_salt="s"),
        "image x in block 2": dict(prompt_token_ids=sys_p + tail_a,
                                   mm_features=[mm("x", 2 * B + 4, 8)]),
        "image x in block 2 again": dict(prompt_token_ids=sys_p + tail_a + tail_b,
                                         mm_features=[mm("x", 2 * B + 4, 8)]),
        "image y in block 2": dict(prompt_token_ids=sys_p + tail_a,
                                   mm_features=[mm("y", 2 * B + 4, 8)]),
        "image x shifted": dict(prompt_token_ids=sys_p + tail_a,
                                mm_features=[mm("x", 2 * B + 5, 8)]),
        "images x, y across blocks": dict(prompt_token_ids=sys_p + tail_a + tail_b,
                                          mm_features=[mm("x", B + 20, 20), mm("y", 3 * B + 1, 40)]),
    }
    return {name: (lambda kw, n=name: Request(n, sampling_params=sp, pooling_params=None, **kw))(kw)
            for name, kw in specs.items()}, Request


def _vllm_hashes(requests: dict, algo: str = "sha256") -> dict:
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    fn = get_hash_fn_by_name(algo)
    init_none_hash(fn)
    hasher = get_request_block_hasher(B, fn)
    return {name: hasher(r) for name, r in requests.items()}


def _keys(requests: dict, secret: str = "fleet") -> dict:
    from shadow.connector.connector import _extra_keys

    bk = BlockKeys(derive_key(secret), B, _extra_keys)
    out = {}
    for name, r in requests.items():
        n = len(r.all_token_ids) // B
        out[name] = bk.of_request(r, [object() for _ in range(n)], {})
    assert bk.n_private == 0
    return out


@vllm_only
@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
def test_one_key_exactly_when_one_vllm_hash(algo):
    reqs, _ = _requests()
    hashes = _vllm_hashes(reqs, algo)
    keys = _keys(reqs)
    h_of = [(h, k) for name in reqs for h, k in zip(hashes[name], keys[name])]
    assert len(h_of) == sum(len(r.all_token_ids) // B for r in reqs.values())
    by_hash: dict = {}
    by_key: dict = {}
    for h, k in h_of:
        by_hash.setdefault(h, set()).add(k)
        by_key.setdefault(k, set()).add(h)
    assert all(len(v) == 1 for v in by_hash.values())
    assert all(len(v) == 1 for v in by_key.values())
    # the cases the table is made of really share and split blocks
    assert len(by_hash) < len(h_of)
    assert keys["plain"][:2] == keys["other tail"][:2] != keys["salt s"][:2]
    assert keys["salt s"][0] == keys["salt s again"][0] != keys["salt t"][0]
    assert keys["lora a"][0] not in (keys["lora a v2"][0], keys["lora b"][0], keys["plain"][0])
    assert keys["image x in block 2"][:2] == keys["plain"][:2]
    assert keys["image x in block 2"][2] not in (keys["plain"][2], keys["image y in block 2"][2],
                                                 keys["image x shifted"][2])
    assert keys["image x in block 2"] == keys["image x in block 2 again"][:4]


@vllm_only
def test_keys_do_not_depend_on_vllms_seed_or_algorithm_and_follow_the_fleet_key(monkeypatch):
    reqs, _ = _requests()
    monkeypatch.setenv("PYTHONHASHSEED", "1")
    h1 = _vllm_hashes(reqs)
    monkeypatch.setenv("PYTHONHASHSEED", "2")
    h2 = _vllm_hashes(reqs)
    assert all(set(h1[n]).isdisjoint(h2[n]) for n in reqs)   # vLLM's hashes follow the seed
    assert _keys(reqs) == _keys(reqs)
    other = _keys(reqs, "another fleet")
    assert all(set(_keys(reqs)[n]).isdisjoint(other[n]) for n in reqs)


def test_a_block_without_tokens_gets_a_private_key():
    bk = BlockKeys(derive_key("fleet"), B)
    memo: dict = {}
    keys = bk.of_request(None, [1, 2, 3], memo)
    assert len(set(keys)) == 3 and bk.n_private == 3 and memo == {}
    assert BlockKeys(derive_key("fleet"), B).of_request(None, [1, 2, 3], {}) != keys
