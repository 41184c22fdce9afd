"""A model's Hugging Face ``config.json``, read in one place for its two uses: the per-block cost of
``--cost-model model:CONFIG`` (:mod:`shadow.sim.cost.arch`) and the bytes of a KV block of
``--kv-config`` (:func:`shadow.sim.tiers.model.kv_bytes_per_block`).

Every error is one :class:`ShadowError` line that starts with the caller's ``where`` (the option
and the file: ``cost model model:CONFIG``, ``--kv-config CONFIG``), then what is wrong: the file
cannot be read, is not a JSON object, lacks a field its use needs or holds a field of the wrong
kind.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from shadow.errors import ShadowError


def read_json_object(path: str, where: str) -> dict[str, Any]:
    """The JSON object in the file ``path`` (a config.json, replay's report.json)."""
    if not path:
        raise ShadowError(f"{where.rstrip()} needs a file name")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ShadowError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ShadowError(f"{where}: it is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ShadowError(f"{where}: it is not a JSON object")
    return data


class ModelConfig:
    """Typed reads of a ``config.json``, its ``text_config`` (multimodal models) over the top level.

    ``use`` names what needs the fields (``"the cost"``, ``"the bytes of a KV block"``), said
    when a field is missing.
    """

    def __init__(self, data: dict[str, Any], where: str, use: str) -> None:
        inner = data.get("text_config")
        self.d = {**data, **inner} if isinstance(inner, dict) else data
        self.where = where
        self.use = use

    def num(self, key: str, default: float | None = None, *, positive: bool = True) -> float:
        """The finite number ``key`` (positive, or non-negative if not ``positive``); ``default``
        when it is absent (refused when there is none)."""
        v = self.d.get(key)
        if v is None:
            if default is None:
                raise ShadowError(f"{self.where}: the config has no {key!r} (needed for "
                                  f"{self.use})")
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or (positive and v <= 0) or v < 0:
            raise ShadowError(f"{self.where}: {key!r} is {v!r}, not a "
                              f"{'positive' if positive else 'non-negative'} number")
        return float(v)

    def get(self, key: str) -> Any:
        return self.d.get(key)


def read_model_config(path: str, where: str, use: str) -> ModelConfig:
    """The ``config.json`` at ``path``, for ``use`` (see :class:`ModelConfig`)."""
    return ModelConfig(read_json_object(path, where), where, use)
