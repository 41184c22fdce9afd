"""SGLang RadixCache reference: lru's OrderedDict, a release touches the block, leaves only.

The leaf-only part (which blocks are held as parents) is the reference loop's
(``RefCache.blocked``), as for any policy under ``leaf-only``; here only the order.
"""

from __future__ import annotations

from shadow.sim.reference.lru import LRU

DEFAULTS = ""
HONOURS_PINS = True


class SGLang(LRU):
    WANTS_RELEASE = True
    leaf_only = True

    def on_release(self, b: int) -> None:
        self.q.move_to_end(b)


def make(capacity: int, params: dict) -> SGLang:
    return SGLang(capacity)
