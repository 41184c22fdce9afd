"""Policy parameters as libCacheSim-style ``k=v,k=v`` strings, checked against a policy's DEFAULTS.

A policy module declares ``DEFAULTS = "small-size-ratio=0.10,move-to-main-threshold=2"``; the type
of each default (int, float, bool ``true/false``, else str) is the type a user value must parse as.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence

from shadow.errors import ShadowError

ParamValue = int | float | bool | str


def _split(text: str, *, where: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ShadowError(f"{where}: bad parameter {part!r}: expected key=value")
        key, value = part.split("=", 1)
        key, value = key.strip(), value.strip()
        if not key:
            raise ShadowError(f"{where}: bad parameter {part!r}: empty key")
        pairs.append((key, value))
    return pairs


def _infer(value: str) -> ParamValue:
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def _coerce(key: str, value: str, default: ParamValue, *, where: str) -> ParamValue:
    try:
        if isinstance(default, bool):
            low = value.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            out = float(value)
            if out != out:
                raise ValueError
            return out
    except ValueError:
        kind = type(default).__name__
        raise ShadowError(f"{where}: bad value {value!r} for {key}: expected {kind}") from None
    return value


def parse_defaults(defaults: str) -> dict[str, ParamValue]:
    """The typed defaults of a policy (``DEFAULTS`` string)."""
    return {k: _infer(v) for k, v in _split(defaults, where="DEFAULTS")}


def parse_params(text: str | None, defaults: str, *, where: str = "parameters") -> dict[str, ParamValue]:
    """Parse ``text`` over ``defaults``: unknown keys and badly typed values raise ShadowError."""
    out = parse_defaults(defaults)
    for key, value in _split(text or "", where=where):
        if key not in out:
            known = ", ".join(sorted(out)) or "none"
            raise ShadowError(f"{where}: unknown parameter {key!r} (known: {known})")
        out[key] = _coerce(key, value, out[key], where=where)
    return out


def format_params(params: dict[str, ParamValue]) -> str:
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items())


#: Modifiers every pin-honouring policy takes beside its own parameters (``--algo-params``), with
#: their defaults: ``leaf-only`` evicts a block only once no resident block names it as its prefix
#: parent (radix-tree eviction; shadow/sim/core/policy.pxd, ``leaf``).
MODIFIERS = "leaf-only=false"


def split_modifiers(text: str | None, *, where: str = "parameters") -> tuple[str, dict[str, ParamValue]]:
    """Take the :data:`MODIFIERS` keys out of ``text``: (the rest, as ``k=v`` text; the modifiers
    given, typed as their defaults).  A badly typed modifier raises ShadowError."""
    defaults = parse_defaults(MODIFIERS)
    given: dict[str, ParamValue] = {}
    rest = []
    for key, value in _split(text or "", where=where):
        if key in defaults:
            given[key] = _coerce(key, value, defaults[key], where=where)
        else:
            rest.append(f"{key}={value}")
    return ",".join(rest), given


def split_named_params(values: Iterable[str], names: Sequence[str], known: Container[str], *,
                       option: str, listing: str) -> dict[str, str]:
    """A repeatable ``option`` (``--algo-params``, ``--router-params``) as each name's
    parameter text: a value ``k=v,...`` is every name's, ``name:k=v,...`` that name's alone
    (``name`` one of ``known``; one not in ``names`` is refused, naming ``listing``, the option
    that lists them).  Per name its values' parts in the order given, joined by commas; later
    keys win when the text is parsed over the defaults (:func:`parse_params`)."""
    out: dict[str, list[str]] = {n: [] for n in names}
    for value in values:
        head, sep, rest = value.partition(":")
        name = head.strip().lower()
        if sep and name in known:
            if name not in out:
                raise ShadowError(f"{option} {value!r}: {name} is not in {listing}")
            out[name].append(rest)
        else:
            for n in names:
                out[n].append(value)
    return {n: ",".join(p for p in v if p.strip()) for n, v in out.items()}


def check_name_list(names: Sequence[str], *, option: str, what: str) -> None:
    """A comma list of names as an option gives it: at least one, none twice."""
    if not names:
        raise ShadowError(f"{option} is empty")
    if len(set(names)) != len(names):
        raise ShadowError(f"{option} lists a {what} twice")
