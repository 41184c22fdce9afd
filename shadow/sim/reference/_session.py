"""The session-level family's shared machinery in plain Python (``policies/session/_base.pyx``).

Residency stays per block; only the victim is chosen per session (PrefixSim fork's
``sessionCache.cpp``).  The rules, docs/policies/session.md:

* ``set_request_ctx`` names the arriving request's session (``session_id < 0``: a fresh
  synthetic session of its own) and its next request (``-1``: never, read as INT64_MAX).
* ``on_request`` (PrefixSim's ``record_request``): the session clock ``now`` ticks; the session
  (created if absent: ``is_new``) **claims** every distinct id of the request, then **releases**
  every id of its previous path; a resident block whose last claim goes is freed at once (kept,
  unclaimed, while pinned: an *orphan*).  A missing id of the request is claimed when the access
  phase inserts it.  Then ``path``, ``last``, ``next``, ``freq = min(3, freq + 1)``, ``cost_sum``
  (the costs of its claimed resident blocks, each block's insert cost) and the selector's
  ``on_touch``.
* ``evict_n(n)``: unpinned orphans first (oldest first), then whole sessions in the selector's
  order until ``n`` blocks are freed (it may free more); a dropped session's blocks whose claims
  reach 0 are freed, or kept as orphans while pinned.  Only when nothing unpinned is left are
  pinned orphans taken (best effort).
* ``evict()``: exactly one block: the oldest unpinned orphan, else the first freed block of the
  next dropped session(s), its other freed blocks becoming orphans (they go next).

Invariant: every resident block is either claimed (``claims[b] > 0``) or an orphan, never both;
a claimed block is resident; ``pending`` holds the current request's missing ids, claimed by
``pending_owner`` when inserted.
"""

from __future__ import annotations

from collections import OrderedDict

INT64_MAX = 2**63 - 1


class Sess:
    """One live session: its latest path (distinct ids), clocks, frequency and cost."""

    __slots__ = ("key", "path", "last", "next", "freq", "cost_sum")

    def __init__(self, key) -> None:
        self.key = key
        self.path: list[int] = []
        self.last = 0
        self.next = INT64_MAX
        self.freq = 0
        self.cost_sum = 0


class SessionRef:
    """Claims, orphans and the drop loop; a subclass supplies ``select``, ``on_touch``,
    ``on_removed`` over session keys."""

    WANTS_REQUEST_CTX = True
    #: the reference loop sets ``self.pinned`` before ``on_request`` (its frees skip pinned blocks)
    READS_PINS_AT_RECORD = True

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.cost: dict[int, int] = {}                  # resident id -> its insert cost
        self.claims: dict[int, int] = {}                # claimed resident id -> claim count
        self.orphans: OrderedDict[int, None] = OrderedDict()   # unclaimed resident, oldest first
        self.pending: set[int] = set()
        self.pending_owner = None
        self.sessions: dict[object, Sess] = {}
        self.now = 0
        self.cur = None
        self.cur_next = INT64_MAX
        self.n_synthetic = 0
        self.pinned: set[int] = set()

    # ---- selector hooks ----

    def select(self):
        raise NotImplementedError

    def on_touch(self, key, is_new: bool) -> None:
        pass

    def on_removed(self, key) -> None:
        pass

    # ---- the policy interface ----

    def __len__(self) -> int:
        return len(self.cost)

    def find(self, b: int) -> bool:
        return b in self.cost

    def hit(self, b: int, acc) -> None:
        pass

    def insert(self, b: int, acc) -> None:
        c = acc.cost if acc.cost > 0 else 1
        self.cost[b] = c
        if b in self.pending:
            self.pending.discard(b)
            self.claims[b] = 1
            s = self.sessions.get(self.pending_owner)
            if s is not None:
                s.cost_sum += c
        else:
            self.orphans[b] = None

    def remove(self, b: int) -> None:
        del self.cost[b]
        self.claims.pop(b, None)
        self.orphans.pop(b, None)

    def set_request_ctx(self, arr) -> None:
        if arr.session_id >= 0:
            self.cur = ("s", arr.session_id)
        else:
            self.cur = None
        self.cur_next = arr.session_next_req if arr.session_next_req >= 0 else INT64_MAX

    def on_request(self, ctx) -> None:
        self.now += 1
        key = self.cur
        if key is None:
            self.n_synthetic += 1
            key = ("syn", self.n_synthetic)
        self.cur = None
        s = self.sessions.get(key)
        is_new = s is None
        if is_new:
            s = self.sessions[key] = Sess(key)
        path = list(dict.fromkeys(ctx.block_ids))
        self.pending = set()
        self.pending_owner = key
        cost_sum = 0
        for b in path:
            if b in self.cost:
                c = self.claims.get(b, 0)
                if c == 0:
                    self.orphans.pop(b, None)
                self.claims[b] = c + 1
                cost_sum += self.cost[b]
            else:
                self.pending.add(b)
        for b in s.path:
            if self.claims.get(b, 0) > 0:
                self.claims[b] -= 1
                if self.claims[b] == 0:
                    self._unclaimed(b, None, self.pinned)
        s.path = path
        s.cost_sum = cost_sum
        s.last = self.now
        s.next = self.cur_next
        s.freq = min(3, s.freq + 1)
        self.on_touch(key, is_new)

    def evict_n(self, acc, n: int, pinned: set[int]) -> list[int]:
        out: list[int] = []
        for b in [b for b in self.orphans if b not in pinned][:n]:
            self._free(b)
            out.append(b)
        while len(out) < n:
            key = self.select()
            if key is None:
                break
            self._drop(key, out, pinned, None)
        for b in list(self.orphans)[: max(0, n - len(out))]:
            self._free(b)                       # best effort: only pinned blocks are left
            out.append(b)
        return out

    def evict(self, acc, pinned: set[int]) -> int:
        b = next((b for b in self.orphans if b not in pinned), 0)
        if b:
            self._free(b)
            return b
        while True:
            key = self.select()
            if key is None:
                break
            out: list[int] = []
            self._drop(key, out, pinned, 1)
            if out:
                return out[0]
        b = next(iter(self.orphans), 0)
        if b:
            self._free(b)
        return b

    # ---- internals ----

    def _free(self, b: int) -> None:
        del self.cost[b]
        self.orphans.pop(b, None)

    def _unclaimed(self, b: int, out: list[int] | None, pinned: set[int],
                   limit: int | None = None) -> None:
        """``b``'s last claim went: free it (into ``out``), or keep it as an orphan while pinned
        or once ``out`` holds ``limit`` victims (``evict``'s one block)."""
        del self.claims[b]
        if b in pinned or (limit is not None and out is not None and len(out) >= limit):
            self.orphans[b] = None
        else:
            self._free(b)
            if out is not None:
                out.append(b)

    def _drop(self, key, out: list[int], pinned: set[int], limit: int | None) -> None:
        s = self.sessions.pop(key)
        for b in s.path:
            if self.claims.get(b, 0) > 0:
                self.claims[b] -= 1
                if self.claims[b] == 0:
                    self._unclaimed(b, out, pinned, limit)
        if key == self.pending_owner:
            self.pending = set()
            self.pending_owner = None
        self.on_removed(key)
