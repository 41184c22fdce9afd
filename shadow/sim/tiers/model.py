"""An offload tier behind a shadow cache: what vLLM's KV offloading to host memory would hold,
load and store, request by request (docs/tiers.md).

The model follows vLLM 0.32's ``OffloadingConnector`` scheduler side
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``) and its CPU backend
(``vllm/v1/kv_offload/cpu/manager.py``, ``cpu/policies/lru.py`` and ``arc.py``):

* The tier holds **chunks** of ``blocks_per_chunk`` engine blocks.  A chunk's key is the hash
  of its last block (here: that block's id); a request has one key per whole chunk of its full
  prompt blocks (``offload_prompt_only``, vLLM's default).
* **Lookup** (``get_num_new_matched_tokens``): after the engine's own GPU prefix hit of ``t``
  tokens, the consecutive chunks from chunk ``t // chunk_tokens`` on that the tier holds; the
  hit ends at ``min(prompt tokens, chunk end)`` and counts only if it adds at least one whole
  chunk of tokens beyond ``t``.
* **Load** (``update_state_after_alloc``): the chunks from the first block not computed locally
  to the end of the hit are loaded; under vLLM's chunk-level offload policy those chunks are not
  offered for storing again.
* **Store** (``_build_store_jobs`` at the end of the prefill): the prompt's chunks from the next
  unstored one are offered (``prepare_store``).  With ``store_threshold >= 2`` a chunk must have
  been offered that many times (an LRU tracker of ``max_tracker_size`` keys counts offers).
  Offered chunks the tier holds are reuses; missing ones are stored, evicting the policy's
  oldest chunks outside the offer; if too few can go, the call stores nothing.
* **Finish** (``on_request_finished``): the policy sees the request's chunks in prefix order
  (LRU: the prefix head becomes the most recent; ARC: reuses move to T2).

NOTE: transfers complete at once (every chunk is ready and evictable between requests), the
tier's operations of a request run together at its admission, and sliding-window, Mamba,
EAGLE and partial-tail variants of the scheduler are not modelled (full attention only).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shadow.errors import ShadowError
from shadow.sim.cost.modelcfg import read_model_config

#: Media, their default bandwidths (GB/s, 10**9 bytes) and what the defaults stand for.
MEDIA: dict[str, tuple[float, str]] = {
    "cpu": (50.0, "host memory over PCIe 5.0 x16 (about 50 GB/s measured of 64 GB/s peak)"),
    "disk": (7.0, "a PCIe 4.0 NVMe drive's sequential read (about 7 GB/s)"),
}
#: Tier policies (vLLM's CachePolicyFactory names).
TIER_POLICIES = ("lru", "arc")
#: ``k=v`` options of a tier and their defaults (vLLM's, except bandwidth).
TIER_DEFAULTS: dict[str, float] = {"bw": 0.0, "chunk": 1, "threshold": 0, "tracker": 64_000}

_UNITS = {"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tib": 1 << 40}


# --- policies: which chunk goes (vLLM's cpu/policies) -----------------------------------------

class LruChunks:
    """Least recently used chunk first.  Invariant: ``order`` holds every chunk, oldest first;
    an insert or a request's use moves a chunk to the newest end."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, key: int) -> bool:
        return key in self.order

    def __len__(self) -> int:
        return len(self.order)

    def insert(self, key: int) -> None:
        self.order[key] = None

    def on_store_miss(self, keys: Sequence[int]) -> None:
        """A store of chunks the tier lacks (LRU learns nothing from it)."""

    def on_request_finished(self, keys: Sequence[int], inserted: set[int],
                            reused: set[int]) -> None:
        # NOTE: deepest chunk first, so the prefix head ends newest (vLLM's reversed ranks)
        for key in reversed(keys):
            if key in self.order:
                self.order.move_to_end(key)

    def evict(self, n: int, protected: set[int]) -> list[int] | None:
        """The ``n`` oldest chunks outside ``protected``, removed; None (nothing removed) if
        fewer than ``n`` can go."""
        out = []
        for key in self.order:
            if len(out) == n:
                break
            if key not in protected:
                out.append(key)
        if len(out) < n:
            return None
        for key in out:
            del self.order[key]
        return out


class ArcChunks:
    """ARC over chunks as vLLM's ``ARCCachePolicy``: T1 (stored once), T2 (reused), ghosts B1
    and B2 (each at most ``capacity`` keys), target T1 size ``p``.  Invariant: a key is in at
    most one of T1, T2, B1, B2; inserts enter T1; only a request's reuse of a ready chunk moves
    it to T2; a store of a ghost key adapts ``p`` once per request before the insert."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.p = 0.0
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, key: int) -> bool:
        return key in self.t1 or key in self.t2

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def insert(self, key: int) -> None:
        self.t1[key] = None
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def _ghost_hit(self, key: int) -> None:
        if key in self.b1:
            self.p = min(self.p + max(1, len(self.b2) / len(self.b1)), self.capacity)
            self.b1.move_to_end(key)
        elif key in self.b2:
            self.p = max(self.p - max(1, len(self.b1) / len(self.b2)), 0)
            self.b2.move_to_end(key)

    def on_store_miss(self, keys: Sequence[int]) -> None:
        for key in reversed(keys):
            self._ghost_hit(key)

    def on_request_finished(self, keys: Sequence[int], inserted: set[int],
                            reused: set[int]) -> None:
        for key in reversed(keys):
            if key in inserted:
                # NOTE: a store is not a reuse: the chunk keeps its list, newest in it
                if key in self.t1:
                    self.t1.move_to_end(key)
                elif key in self.t2:
                    self.t2.move_to_end(key)
            elif key in reused:
                if key in self.t1:
                    del self.t1[key]
                    self.t2[key] = None
                elif key in self.t2:
                    self.t2.move_to_end(key)

    def evict(self, n: int, protected: set[int]) -> list[int] | None:
        """``n`` chunks, each from T1 while T1 holds at least ``int(p)`` of them (as counted
        down during this call), else from T2, else T1; all or nothing.  Then ghosts are cut to
        ``capacity`` keys each, oldest first."""
        if n == 0:
            return []
        free1 = (k for k in self.t1 if k not in protected)
        free2 = (k for k in self.t2 if k not in protected)
        size1 = len(self.t1)
        picked: list[tuple[int, bool]] = []
        for _ in range(n):
            key = None
            if size1 >= int(self.p):
                key = next(free1, None)
                if key is not None:
                    picked.append((key, True))
                    size1 -= 1
                    continue
            key = next(free2, None)
            if key is not None:
                picked.append((key, False))
                continue
            key = next(free1, None)
            if key is None:
                return None
            picked.append((key, True))
            size1 -= 1
        out = []
        for key, from_t1 in picked:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
            out.append(key)
        for ghost in (self.b1, self.b2):
            while len(ghost) > self.capacity:
                ghost.popitem(last=False)
        return out


_POLICY_CLASSES = {"lru": LruChunks, "arc": ArcChunks}


# --- the manager: chunk pool, store threshold, a request's accesses --------------------------

@dataclass
class _RequestAccess:
    """The chunks one request touched: in first-touch order, stored by it, reused by it."""

    keys: list[int] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    inserted: set[int] = field(default_factory=set)
    reused: set[int] = field(default_factory=set)
    store_missed: set[int] = field(default_factory=set)

    def record(self, keys: Iterable[int]) -> None:
        for k in keys:
            if k not in self.seen:
                self.seen.add(k)
                self.keys.append(k)


class OffloadTier:
    """One tier of ``n_chunks`` chunks under ``policy`` (``lru`` or ``arc``), with vLLM's
    ``CPUOffloadingManager`` decisions (see the module docstring).  Invariant: ``len(policy)
    <= n_chunks``; the tier holds exactly the chunks ``policy`` holds."""

    def __init__(self, n_chunks: int, policy: str = "lru", store_threshold: int = 0,
                 max_tracker_size: int = 64_000) -> None:
        self.n_chunks = n_chunks
        self.policy = _POLICY_CLASSES[policy](n_chunks)
        self.store_threshold = store_threshold
        self.max_tracker_size = max_tracker_size
        self.counts: OrderedDict[int, int] | None = OrderedDict() if store_threshold >= 2 else None
        self.n_stored = self.n_evicted = self.n_store_failed = self.n_store_skipped = 0

    def holds(self, key: int) -> bool:
        return key in self.policy

    def _count_offers(self, keys: Sequence[int]) -> None:
        """The store-threshold tracker: an LRU of offer counts that never drops a key of this
        offer to make room for another."""
        counts = self.counts
        assert counts is not None
        protected = set()
        for k in keys:
            if k in counts:
                counts.move_to_end(k)
                counts[k] += 1
                protected.add(k)
        n_free = len(counts) - len(protected)
        for k in keys:
            if k in counts:
                continue
            if len(counts) >= self.max_tracker_size:
                if n_free == 0:
                    continue
                counts.popitem(last=False)
                n_free -= 1
            counts[k] = 1

    def load(self, keys: Sequence[int], acc: _RequestAccess) -> None:
        """``prepare_load`` + ``complete_load``: a reuse of chunks the tier holds."""
        acc.record(keys)
        acc.reused.update(k for k in keys if k not in acc.inserted)

    def store(self, keys: Sequence[int], acc: _RequestAccess,
              also_protected: Collection[int] = ()) -> list[int] | None:
        """``prepare_store`` + ``complete_store``: the keys stored (None: eviction failed).
        Eviction passes over the offered keys and ``also_protected`` (chunks whose transfer is
        in flight: vLLM's non-evictable ``ref_cnt != 0``)."""
        if self.counts is not None:
            self._count_offers(keys)
        new = [k for k in keys if k not in self.policy]
        existing = [k for k in keys if k in self.policy]
        if self.counts is not None:
            before = len(new)
            new = [k for k in new if self.counts.get(k, 0) >= self.store_threshold]
            self.n_store_skipped += before - len(new)
        missed = [k for k in new if k not in acc.store_missed]
        if missed:
            self.policy.on_store_miss(missed)
            acc.store_missed.update(missed)
        recorded = set(new).union(existing)
        acc.record(k for k in keys if k in recorded)
        acc.reused.update(k for k in existing if k not in acc.inserted)
        if not new:
            return []
        need = len(new) - (self.n_chunks - len(self.policy))
        if need > 0:
            gone = self.policy.evict(need, set(keys).union(also_protected))
            if gone is None:
                self.n_store_failed += 1
                return None
            self.n_evicted += len(gone)
        for k in new:
            self.policy.insert(k)
        self.n_stored += len(new)
        acc.inserted.update(new)
        return new

    def finish(self, acc: _RequestAccess) -> None:
        """``on_request_finished``: the policy sees the request's chunks in prefix order."""
        self.policy.on_request_finished(acc.keys, acc.inserted - acc.reused, acc.reused)


# --- the scheduler side: which chunks a request looks up, loads and stores --------------------

@dataclass(frozen=True)
class TierOutcome:
    """One request's use of the tier: tokens loaded from it, chunks loaded and stored."""

    hit_tokens: int
    loaded_chunks: int
    stored_chunks: int


def _lookup_window(block_ids: Sequence[int], prompt_tokens: int, gpu_hit_blocks: int,
                   block_tokens: int, k: int) -> tuple[list[int], tuple[int, int, int] | None]:
    """A request's chunk keys and the chunks its lookup scans: ``(start, end, max hit
    tokens)``, or None when the tier could add less than one chunk beyond the GPU hit."""
    chunk_tokens = block_tokens * k
    n_keys = min(prompt_tokens // block_tokens, len(block_ids)) // k
    keys = [block_ids[(i + 1) * k - 1] for i in range(n_keys)]
    local = gpu_hit_blocks * block_tokens
    max_hit = min(prompt_tokens, n_keys * chunk_tokens)
    if max_hit - local < chunk_tokens:
        return keys, None
    return keys, (local // chunk_tokens, min(-(-max_hit // chunk_tokens), n_keys), max_hit)


def _hit_tokens(max_hit: int, start: int, n: int, local: int, chunk_tokens: int) -> int:
    """Tokens a lookup of ``n`` consecutive chunks from chunk ``start`` adds to a GPU hit of
    ``local`` tokens (0 unless at least one whole chunk)."""
    top = min(max_hit, chunk_tokens * (start + n))
    return top - local if top - local >= chunk_tokens else 0


def serve_request(tier: OffloadTier, block_ids: Sequence[int], prompt_tokens: int,
                  gpu_hit_blocks: int, block_tokens: int, blocks_per_chunk: int) -> TierOutcome:
    """One request through ``tier`` after the engine's GPU prefix hit of ``gpu_hit_blocks``
    blocks.  ``block_ids``: the request's block ids in prefix order (at least its full prompt
    blocks)."""
    k = blocks_per_chunk
    chunk_tokens = block_tokens * k
    keys, window = _lookup_window(block_ids, prompt_tokens, gpu_hit_blocks, block_tokens, k)
    n_keys = len(keys)
    acc = _RequestAccess()
    local = gpu_hit_blocks * block_tokens
    hit = 0
    if window is not None:
        start, end, max_hit = window
        n = 0
        for key in keys[start:end]:
            if not tier.holds(key):
                break
            n += 1
        hit = _hit_tokens(max_hit, start, n, local, chunk_tokens)
    next_stored = 0
    loaded = 0
    if hit:
        n_cached = local + hit
        first = gpu_hit_blocks // k
        last = -(-n_cached // chunk_tokens)
        tier.load(keys[first:last], acc)
        loaded = last - first
        next_stored = last         # vLLM's chunk-level offload policy: loaded chunks are not re-stored
    stored = 0
    if n_keys > next_stored:
        got = tier.store(keys[next_stored:n_keys], acc)
        stored = len(got) if got else 0
    tier.finish(acc)
    return TierOutcome(hit, loaded, stored)


# --- a chain: a host tier with a disk tier behind it (vLLM's TieringOffloadingManager) --------

#: A chunk lookup's answers (vLLM's ``LookupResult``): ready in the host tier; found but not yet
#: readable (a promotion in flight, or refused for now by the store threshold: the scheduler
#: retries next step); in no tier, or its promotion found no room; not known yet (the disk
#: tier's asynchronous probe answers at the step's end: not counted, the scan goes on).
LOOKUP_HIT, LOOKUP_PENDING, LOOKUP_MISS, LOOKUP_RETRY = 0, 1, 2, 3


class TierChain:
    """A host (``cpu``) tier with a disk tier behind it, with the decisions of vLLM 0.32's
    ``TieringOffloadingManager`` (``vllm/v1/kv_offload/tiering/manager.py``):

    * **cascade**: every chunk the host tier stores from the GPU is stored to the disk tier too
      (``complete_store``); chunks the host tier already held are not offered again;
    * **staged promotion**: a lookup of a chunk the host tier lacks and the disk tier holds
      promotes it (the host tier's ``prepare_store`` of that one key, with its eviction, which
      passes over the promotions still in flight) and answers ``HIT_PENDING``; the request's
      lookup is retried after the transfers complete, and loads from the host tier;
    * a promoted chunk is an insert of the request in the host tier (not a reuse) and a reuse in
      the disk tier, and its tokens are the disk tier's hit (vLLM's ``CacheHitSource.DISK``).

    Invariant: between requests no promotion is in flight (``pending`` is empty)."""

    def __init__(self, cpu: OffloadTier, disk: OffloadTier) -> None:
        self.cpu, self.disk = cpu, disk
        self.n_promoted = self.n_promote_failed = self.n_cascaded = self.n_gave_up = 0
        self.pending: set[int] = set()
        self.promoted: set[int] = set()
        self.probed: set[int] = set()
        self.acc = _RequestAccess()
        self.disk_acc = _RequestAccess()
        self.position: dict[int, int] = {}
        self.cascaded = 0

    @property
    def retry_slack(self) -> int:
        """Scans a lookup may take beyond three per chunk before it gives up: the store
        threshold (each scan offers a promotion once more)."""
        return self.cpu.store_threshold

    def begin(self, keys: Sequence[int]) -> None:
        """A new request (``on_new_request``) with its chunk keys in prefix order."""
        self.acc, self.disk_acc = _RequestAccess(), _RequestAccess()
        self.promoted = set()
        self.probed = set()
        self.position = {key: i for i, key in enumerate(keys)}

    def lookup(self, key: int) -> int:
        """One chunk's lookup: host tier first, then the disk tier (promoting what it holds)."""
        if self.cpu.holds(key):
            return LOOKUP_PENDING if key in self.pending else LOOKUP_HIT
        if key not in self.probed:
            # NOTE: vLLM's file-system tier probes for a chunk's file on a thread and answers
            # RETRY until the probe lands (one step); the answer is kept for the request
            self.probed.add(key)
            return LOOKUP_RETRY
        if not self.disk.holds(key):
            return LOOKUP_MISS
        cpu = self.cpu
        # NOTE: a promotion is the host tier's prepare_store of one key (vLLM's prepare_write),
        # with its tracker and eviction, but it is not a store from the GPU: its counters are
        # the chain's
        before = cpu.n_stored, cpu.n_store_failed
        got = cpu.store([key], self.acc, self.pending)
        cpu.n_stored, cpu.n_store_failed = before
        if got is None:
            self.n_promote_failed += 1
            return LOOKUP_MISS
        if got:
            self.pending.add(key)
            self.promoted.add(key)
            self.n_promoted += 1
            self.disk.load([key], self.disk_acc)
        return LOOKUP_PENDING

    def step_end(self) -> None:
        """The end of a scheduler step: the promotions in flight complete."""
        self.pending.clear()

    def source_is_disk(self, key: int) -> bool:
        """Whether ``key``'s tokens count as the disk tier's hit (promoted for this request)."""
        return key in self.promoted

    def load(self, keys: Sequence[int]) -> None:
        self.cpu.load(keys, self.acc)

    def store(self, keys: Sequence[int]) -> list[int] | None:
        """The host tier's store, then the cascade of what it stored to the disk tier."""
        got = self.cpu.store(keys, self.acc)
        self.cascaded = 0
        if got:
            down = self.disk.store(got, self.disk_acc)
            self.cascaded = len(down) if down else 0
            self.n_cascaded += self.cascaded
        return got

    def finish(self) -> None:
        """``on_request_finished`` in both tiers, each seeing the request's chunks in prefix
        order (vLLM sorts them by position: promotions touch chunks out of order)."""
        for acc in (self.acc, self.disk_acc):
            acc.keys.sort(key=self.position.__getitem__)
        self.cpu.finish(self.acc)
        self.disk.finish(self.disk_acc)


@dataclass(frozen=True)
class ChainOutcome:
    """One request's use of a chain: tokens loaded to the GPU (all through the host tier) and
    of them those whose chunks came from the disk tier, chunks loaded to the GPU and of them
    the promoted ones, chunks stored from the GPU to the host tier and cascaded to disk."""

    hit_tokens: int
    disk_hit_tokens: int
    loaded_chunks: int
    promoted_loaded_chunks: int
    stored_chunks: int
    cascaded_chunks: int


def serve_chain(chain, block_ids: Sequence[int], prompt_tokens: int, gpu_hit_blocks: int,
                block_tokens: int, blocks_per_chunk: int) -> ChainOutcome:
    """One request through a :class:`TierChain` (or any object with its ``begin``, ``lookup``,
    ``step_end``, ``source_is_disk``, ``load``, ``store``, ``finish``, ``cascaded``,
    ``retry_slack`` and ``n_gave_up``), as
    :func:`serve_request` does for one tier, with the scheduler's lookup retried step by step
    while any chunk answers ``HIT_PENDING`` (vLLM: ``get_num_new_matched_tokens`` returns None
    and the request waits).  The scan gives up after ``3 * chunks + retry_slack + 4`` steps (a
    run longer than the host tier can promote into cycles forever in vLLM) and loads
    nothing."""
    k = blocks_per_chunk
    chunk_tokens = block_tokens * k
    keys, window = _lookup_window(block_ids, prompt_tokens, gpu_hit_blocks, block_tokens, k)
    n_keys = len(keys)
    chain.begin(keys)
    local = gpu_hit_blocks * block_tokens
    hit = 0
    if window is not None:
        start, end, max_hit = window
        limit = 3 * (end - start) + chain.retry_slack + 4
        for _ in range(limit):
            n = 0
            deferred = False
            for key in keys[start:end]:
                r = chain.lookup(key)
                if r == LOOKUP_MISS:
                    break
                if r == LOOKUP_RETRY:
                    deferred = True
                    continue
                n += 1
                deferred = deferred or r == LOOKUP_PENDING
            chain.step_end()
            if not deferred:
                break
        else:
            chain.n_gave_up += 1
            n = 0
        hit = _hit_tokens(max_hit, start, n, local, chunk_tokens)
    next_stored = loaded = disk_hit = promoted_loaded = 0
    if hit:
        n_cached = local + hit
        first = gpu_hit_blocks // k
        last = -(-n_cached // chunk_tokens)
        chain.load(keys[first:last])
        loaded = last - first
        next_stored = last
        for i in range(first, last):
            if chain.source_is_disk(keys[i]):
                promoted_loaded += 1
                disk_hit += min(n_cached, (i + 1) * chunk_tokens) - max(local, i * chunk_tokens)
    stored = cascaded = 0
    if n_keys > next_stored:
        got = chain.store(keys[next_stored:n_keys])
        stored = len(got) if got else 0
        cascaded = chain.cascaded if got else 0
    chain.finish()
    return ChainOutcome(hit, disk_hit, loaded, promoted_loaded, stored, cascaded)


# --- configuration: --tier and the bytes of a block --------------------------------------------

@dataclass(frozen=True)
class TierSpec:
    """One tier configuration: medium, capacity (in bytes or in engine blocks), policy,
    bandwidth (GB/s), blocks per chunk, store threshold, tracker size."""

    medium: str
    size_text: str
    policy: str
    bandwidth_gbps: float
    blocks_per_chunk: int = 1
    store_threshold: int = 0
    max_tracker_size: int = 64_000
    size_bytes: int | None = None
    size_blocks: int | None = None

    def n_chunks(self, bytes_per_block: int | None, where: str | None = None,
                 bytes_from: str = "--bytes-per-block or --kv-config") -> int:
        """The tier's capacity in chunks (bytes need ``bytes_per_block``).  Errors start with
        ``where`` (default ``--tier MEDIUM:SIZE``) and name ``bytes_from`` as the place to give
        the bytes of a block."""
        where = where or f"--tier {self.medium}:{self.size_text}"
        if self.size_blocks is not None:
            n = self.size_blocks // self.blocks_per_chunk
        else:
            if not bytes_per_block:
                raise ShadowError(f"{where}: a size in bytes ({self.size_text}) needs the bytes "
                                  f"of a KV block ({bytes_from})")
            assert self.size_bytes is not None
            n = self.size_bytes // (bytes_per_block * self.blocks_per_chunk)
        if n < 1:
            raise ShadowError(f"{where}: {self.size_text} is smaller than one offload chunk "
                              f"({self.blocks_per_chunk} blocks)")
        return n

    @property
    def label(self) -> str:
        return f"{self.medium}:{self.size_text}:{self.policy}"


def _parse_size(text: str, where: str) -> tuple[int | None, int | None]:
    """``64g``/``64GiB``/``512m`` (bytes) or ``8192blk``/``8kblk`` (engine blocks)."""
    t = text.strip().lower()
    blocks = t.endswith("blk")
    if blocks:
        t = t[:-3]
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):]
    try:
        v = float(num)
    except ValueError:
        v = -1.0
    mult = 1 if unit == "" else _UNITS.get(unit)
    if mult is None or not math.isfinite(v) or v <= 0 or (blocks and unit not in ("", "k", "m")):
        raise ShadowError(f"{where}: size {text!r} is not a positive size such as 64g, 512MiB "
                          f"or 8kblk")
    n = int(v * mult)
    return (None, n) if blocks else (n, None)


def parse_tier(text: str, where: str | None = None) -> list[TierSpec]:
    """``MEDIUM:SIZE[,SIZE...]:POLICY[:k=v,...]`` (``--tier``): one spec per size.  Errors start
    with ``where`` (default ``--tier TEXT``)."""
    where = where or f"--tier {text}"
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise ShadowError(f"{where}: not MEDIUM:SIZES:POLICY[:k=v,...]")
    medium, sizes, policy = (p.strip().lower() for p in parts[:3])
    if medium not in MEDIA:
        raise ShadowError(f"{where}: unknown medium {medium!r} (one of {', '.join(MEDIA)})")
    if policy not in TIER_POLICIES:
        raise ShadowError(f"{where}: unknown tier policy {policy!r} (one of "
                          f"{', '.join(TIER_POLICIES)}, vLLM's)")
    opts = dict(TIER_DEFAULTS)
    opts["bw"] = MEDIA[medium][0]
    if len(parts) == 4 and parts[3].strip():
        for kv in parts[3].split(","):
            k, sep, v = kv.partition("=")
            k = k.strip().lower()
            if not sep or k not in TIER_DEFAULTS:
                raise ShadowError(f"{where}: unknown tier option {kv.strip()!r} (one of "
                                  f"{', '.join(f'{o}=' for o in TIER_DEFAULTS)})")
            try:
                val = float(v)
            except ValueError:
                val = math.nan
            whole = k != "bw"
            if not math.isfinite(val) or val < (0 if k == "threshold" else 1e-9) \
                    or (whole and val != int(val)) or val > 2**40:
                raise ShadowError(f"{where}: {k}={v.strip()} is not a "
                                  f"{'non-negative whole number' if k == 'threshold' else 'positive whole number' if whole else 'positive number'}")
            opts[k] = val
    out = []
    for s in sizes.split(","):
        if not s.strip():
            raise ShadowError(f"{where}: empty size")
        nb, nblk = _parse_size(s, where)
        out.append(TierSpec(medium, s.strip(), policy, float(opts["bw"]), int(opts["chunk"]),
                            int(opts["threshold"]), int(opts["tracker"]), nb, nblk))
    return out


#: Keys of a tier given as a mapping (the connector's ``tiers`` entries): key -> the ``--tier``
#: part it fills (``size``/``sizes``: SIZES; ``chunk_tokens``: ``chunk=`` in engine blocks).
TIER_MAPPING_KEYS: dict[str, str] = {
    "medium": "MEDIUM", "size": "SIZES", "sizes": "SIZES", "policy": "POLICY", "bw": "bw",
    "bandwidth_gbps": "bw", "chunk": "chunk", "blocks_per_chunk": "chunk",
    "chunk_tokens": "chunk", "threshold": "threshold", "store_threshold": "threshold",
    "tracker": "tracker", "max_tracker_size": "tracker",
}


def parse_tier_entry(entry: object, where: str, block_tokens: int) -> list[TierSpec]:
    """One tier configuration as ``--tier`` text or as a mapping of :data:`TIER_MAPPING_KEYS`
    (``{"medium": "cpu", "sizes": ["16GiB", "64GiB"], "policy": "lru", "bw": 25}``); one spec
    per size.  ``chunk_tokens`` (vLLM's offloading ``block_size``) must be a whole number of
    engine blocks of ``block_tokens`` tokens.  The mapping is written as ``--tier`` text and
    parsed by :func:`parse_tier`, so both forms take the same checks; errors start with
    ``where``."""
    if isinstance(entry, str):
        if ">" in entry:
            # NOTE: a chain is parse_tiers' (offline); the connector runs single tiers
            raise ShadowError(f"{where}: a chain (CPU>DISK) runs offline only (shadow simulate "
                              f"--tier); give its tiers one by one here")
        return parse_tier(entry, where)
    if not isinstance(entry, Mapping):
        raise ShadowError(f"{where}: expected MEDIUM:SIZES:POLICY[:k=v,...] or a mapping, got "
                          f"{type(entry).__name__} {entry!r:.80}")
    parts: dict[str, str] = {}
    for key, val in entry.items():
        part = TIER_MAPPING_KEYS.get(str(key))
        if part is None:
            raise ShadowError(f"{where}.{key}: unknown tier key (known: "
                              f"{', '.join(TIER_MAPPING_KEYS)})")
        if part in parts:
            raise ShadowError(f"{where}.{key}: {part} is given twice")
        if part == "SIZES" and isinstance(val, (list, tuple)):
            val = ",".join(str(v) for v in val)
        if isinstance(val, bool) or not isinstance(val, (str, int, float)) or \
                any(c in str(val) for c in ":=" + ("" if part == "SIZES" else ",")):
            raise ShadowError(f"{where}.{key}: {val!r:.80} is not a {part} value")
        text = str(val).strip()
        if key == "chunk_tokens":
            try:
                tokens = float(text)
            except ValueError:
                tokens = math.nan
            if not math.isfinite(tokens) or tokens <= 0 or tokens != int(tokens) \
                    or int(tokens) % block_tokens:
                raise ShadowError(f"{where}.chunk_tokens: {text} is not a multiple of the "
                                  f"engine block size ({block_tokens} tokens)")
            text = str(int(tokens) // block_tokens)
        parts[part] = text
    if "SIZES" not in parts:
        raise ShadowError(f"{where}: no size (give size or sizes: 64GiB, 512MiB or 8192blk)")
    opts = ",".join(f"{k}={parts[k]}" for k in TIER_DEFAULTS if k in parts)
    text = f"{parts.get('MEDIUM', 'cpu')}:{parts['SIZES']}:{parts.get('POLICY', 'lru')}"
    return parse_tier(text + (f":{opts}" if opts else ""), where)


#: The media a chain puts behind the host tier, in order (vLLM's primary tier is host memory;
#: its file-system secondary tier is ``disk`` here).
CHAIN_ORDER = ("cpu", "disk")


@dataclass(frozen=True)
class TierChainSpec:
    """A chain ``cpu:...>disk:...`` (``--tier``): a host tier and a disk tier behind it, one
    size of each.  Invariant: ``first.medium == "cpu"``, ``second.medium == "disk"``, one
    ``blocks_per_chunk``, and the disk tier has no store threshold (vLLM cascades every
    chunk the host tier stores)."""

    first: TierSpec
    second: TierSpec

    @property
    def tiers(self) -> tuple[TierSpec, TierSpec]:
        return (self.first, self.second)

    @property
    def label(self) -> str:
        return f"{self.first.label}>{self.second.label}"

    @property
    def blocks_per_chunk(self) -> int:
        return self.first.blocks_per_chunk

    def n_chunks(self, bytes_per_block: int | None, where: str | None = None,
                 bytes_from: str = "--bytes-per-block or --kv-config") -> int:
        """The host tier's capacity in chunks; checks the disk tier's too."""
        self.second.n_chunks(bytes_per_block, where, bytes_from)
        return self.first.n_chunks(bytes_per_block, where, bytes_from)


def parse_tiers(text: str, where: str | None = None) -> list[TierSpec | TierChainSpec]:
    """``--tier``: one tier (:func:`parse_tier`) or a chain ``CPU_TIER>DISK_TIER``, each part
    in ``--tier``'s grammar, one spec per pair of sizes (host sizes outer).  The disk part's
    ``chunk=`` defaults to the host part's and may not differ; ``threshold=`` and
    ``tracker=`` belong to the host tier, and a threshold of 2 or more is refused (vLLM's
    ``TieringOffloadingSpec`` refuses ``store_threshold``).  Errors start with ``where``
    (default ``--tier TEXT``) and name the part at fault."""
    where = where or f"--tier {text}"
    parts = text.split(">")
    if len(parts) == 1:
        return list(parse_tier(text, where))
    if len(parts) > len(CHAIN_ORDER):
        raise ShadowError(f"{where}: a chain has at most {len(CHAIN_ORDER)} tiers "
                          f"({'>'.join(CHAIN_ORDER)})")
    levels = []
    for i, part in enumerate(parts):
        medium = part.split(":", 1)[0].strip().lower()
        if medium in MEDIA and medium != CHAIN_ORDER[i]:
            if i == 0:
                raise ShadowError(f"{where}: a chain starts with the cpu tier (vLLM's primary "
                                  f"tier is host memory), not {medium}")
            raise ShadowError(f"{where}: tier {i + 1} of a chain is disk, not {medium} (one "
                              f"cpu tier, then one disk tier)")
        levels.append(parse_tier(part, where))
    opts = parts[1].split(":")[3] if len(parts[1].split(":")) == 4 else ""
    given = {kv.partition("=")[0].strip().lower() for kv in opts.split(",") if kv.strip()}
    for key in ("threshold", "tracker"):
        if key in given:
            raise ShadowError(f"{where}: {key}= is the cpu tier's (vLLM cascades every chunk "
                              f"the cpu tier stores to the disk tier)")
    if levels[0][0].store_threshold >= 2:
        raise ShadowError(f"{where}: threshold={levels[0][0].store_threshold} in a chain (vLLM's "
                          f"TieringOffloadingSpec refuses store_threshold)")
    k = levels[0][0].blocks_per_chunk
    if "chunk" in given and levels[1][0].blocks_per_chunk != k:
        raise ShadowError(f"{where}: chunk={levels[1][0].blocks_per_chunk} on the disk tier "
                          f"differs from the cpu tier's {k} (vLLM's tiers share one chunk)")
    seconds = [TierSpec(s.medium, s.size_text, s.policy, s.bandwidth_gbps, k, 0,
                        s.max_tracker_size, s.size_bytes, s.size_blocks) for s in levels[1]]
    return [TierChainSpec(a, b) for a in levels[0] for b in seconds]


#: Bytes per element of the KV cache dtypes vLLM names (``--kv-cache-dtype``).
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
               "auto": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}


def kv_bytes_per_block(config_path: str, block_tokens: int, dtype: str = "auto") -> int:
    """Bytes of one engine block's KV over every attention layer of a Hugging Face
    ``config.json``: ``2 * kv_heads * head_dim`` per token and layer (keys and values), MLA's
    ``kv_lora_rank + qk_rope_head_dim`` (one latent), linear/state-space layers none."""
    where = f"--kv-config {config_path}"
    c = read_model_config(config_path, where, "the bytes of a KV block")
    if dtype not in DTYPE_BYTES:
        raise ShadowError(f"{where}: unknown KV cache dtype {dtype!r}")
    n_layers = int(c.num("num_hidden_layers"))
    types = c.get("layer_types")
    if isinstance(types, list):
        n_attn = sum(1 for t in types if t in ("full_attention", "sliding_attention"))
    else:
        n_attn = n_layers
    if c.get("kv_lora_rank"):
        per_token = c.num("kv_lora_rank") + float(c.get("qk_rope_head_dim") or 0)
    else:
        heads = c.num("num_attention_heads")
        per_token = 2 * c.num("num_key_value_heads", heads) * c.num("head_dim",
                                                                    c.num("hidden_size") / heads)
    return int(n_attn * per_token * block_tokens * DTYPE_BYTES[dtype])
