"""Atomic file output: write under a temporary name beside the target, rename it there on success.

Invariant: the target either keeps its previous content or holds the complete new content, never
a part of it; on any failure (an exception, Ctrl-C) the temporary file is removed again.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: Prefix of every temporary name this module makes (a resumable writer may sweep these away).
TMP_PREFIX = ".tmp-"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, suffix: str = "",
                prefix: str = TMP_PREFIX) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; rename it to ``path`` when the block ends.

    ``suffix`` keeps a file type visible to writers that go by the extension (matplotlib).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        # NOTE: BaseException so that Ctrl-C in the middle of a write leaves no stray file.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, *, prefix: str = TMP_PREFIX) -> None:
    """Write ``text`` (UTF-8, newlines untranslated) to ``path`` atomically."""
    with atomic_path(path, prefix=prefix) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
