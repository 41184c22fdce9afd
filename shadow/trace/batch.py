"""The unit the trace layer hands to the simulator: a batch of whole requests as flat arrays.

One event shape serves offline replay and the live connector: a request is its record
(times, lengths, session fields) plus its block ids in prefix order.  A :class:`Batch` holds
``n`` consecutive requests of a trace without a Python object per block:

* ``records``      ``RECORD_DTYPE[n]``; ``records["n_blocks"][i]`` blocks belong to request i
* ``offsets``      ``int64[n + 1]``; request i's blocks are ``block_ids[offsets[i]:offsets[i+1]]``
* ``block_ids``    ``int64[m]``; dense ids from 1, in prefix order (entry 0 = root block)
* ``next_access``  ``int64[m]``; absolute next-access vtime of each entry (1-based position in
  the forward-flattened trace), ``-1`` never again; all ``-1`` when the trace has none
* ``first_request`` index (0-based, file order) of the batch's first request
* ``first_vtime``  vtime (1-based) of the batch's first entry, i.e. the number of entries before
  it plus one
* ``block_keys``   ``int64[m]`` or None: each entry's block key (lcp v2 BLOCK_KEYS: a keyed
  63-bit digest, equal across the replicas of a fleet exactly when vLLM's block hashes are);
  None when the trace has none

Invariant: ``offsets[0] == 0``, ``offsets[-1] == m``, ``diff(offsets) == records["n_blocks"]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shadow.trace.format import empty_records


@dataclass(frozen=True)
class Batch:
    records: np.ndarray
    offsets: np.ndarray
    block_ids: np.ndarray
    next_access: np.ndarray
    first_request: int = 0
    first_vtime: int = 1
    block_keys: np.ndarray | None = None

    @property
    def n_requests(self) -> int:
        return int(self.records.shape[0])

    @property
    def n_blocks(self) -> int:
        return int(self.block_ids.shape[0])

    def request_blocks(self, i: int) -> np.ndarray:
        return self.block_ids[self.offsets[i]:self.offsets[i + 1]]

    @classmethod
    def from_lists(cls, requests: list[list[int]], *, next_access: list[list[int]] | None = None,
                   records: np.ndarray | None = None, first_request: int = 0,
                   first_vtime: int = 1) -> "Batch":
        """Build a batch from Python lists (tests, the live connector); not for hot paths."""
        n = len(requests)
        lengths = np.fromiter((len(r) for r in requests), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = [b for r in requests for b in r]
        block_ids = np.asarray(flat, dtype=np.int64).reshape(-1)
        if next_access is None:
            nxt = np.full(block_ids.shape[0], -1, dtype=np.int64)
        else:
            nxt = np.asarray([x for r in next_access for x in r], dtype=np.int64).reshape(-1)
        if records is None:
            records = empty_records(n)
            records["n_blocks"] = lengths
        return cls(records, offsets, block_ids, nxt, first_request, first_vtime)
