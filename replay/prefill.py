"""A prefill-time model fitted to measured TTFT: what a cache hit is worth in seconds.

The model, for a request of ``L`` prompt tokens of which ``u`` are not cached (``c = L - u``):

    TTFT = a + b * u + d * u * (c + u / 2)

``a`` is the fixed overhead (queueing, scheduling, the first decode step, the network), ``b`` the
per-token cost of the linear layers, ``d`` the attention cost: each of the ``u`` new tokens attends
to the cached context plus, on average, half of the new tokens.  It is fitted by ordinary least
squares on the successful requests; ``fit_prefill`` says how well (R^2, RMSE) and refuses data that
cannot determine it (fewer requests than terms, or no spread in ``u``), falling back to fewer terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shadow.errors import ShadowError


def features(uncached: np.ndarray, context: np.ndarray, terms: int = 3) -> np.ndarray:
    u = np.asarray(uncached, dtype=np.float64)
    L = np.asarray(context, dtype=np.float64)
    c = L - u
    cols = [np.ones_like(u), u, u * (c + u / 2.0)]
    return np.stack(cols[:terms], axis=1)


@dataclass(frozen=True)
class PrefillModel:
    coef: tuple[float, ...]  # (a, b[, d]) in seconds, seconds/token, seconds/token^2
    r2: float
    rmse_s: float
    n: int

    def predict(self, uncached: np.ndarray | float, context: np.ndarray | float) -> np.ndarray:
        u = np.atleast_1d(np.asarray(uncached, dtype=np.float64))
        L = np.broadcast_to(np.atleast_1d(np.asarray(context, dtype=np.float64)), u.shape)
        return features(u, L, len(self.coef)) @ np.asarray(self.coef)

    def describe(self) -> str:
        names = ("a", "b", "d")
        return ("TTFT = " + " + ".join(
            f"{v:.4g}" + ("" if i == 0 else " * u" if i == 1 else " * u * (c + u/2)")
            for i, v in enumerate(self.coef)) + f"  ({', '.join(names[:len(self.coef)])}; "
                f"R^2 {self.r2:.3f}, RMSE {self.rmse_s * 1e3:.2f} ms, n {self.n})")


def fit_prefill(ttft_s: np.ndarray, uncached: np.ndarray, context: np.ndarray) -> PrefillModel:
    """Least-squares fit of TTFT against uncached tokens and context length."""
    y = np.asarray(ttft_s, dtype=np.float64)
    u = np.asarray(uncached, dtype=np.float64)
    L = np.asarray(context, dtype=np.float64)
    if not (y.shape == u.shape == L.shape):
        raise ShadowError("fit_prefill: ttft, uncached and context differ in length")
    ok = np.isfinite(y) & np.isfinite(u) & np.isfinite(L)
    y, u, L = y[ok], u[ok], L[ok]
    if y.size < 2:
        raise ShadowError(f"cannot fit a prefill model to {y.size} measured requests (need at least 2)")
    # NOTE: the quadratic term needs spread in u and more points than terms; fall back otherwise.
    terms = 3 if y.size >= 4 and np.ptp(u) > 0 else 2 if np.ptp(u) > 0 else 1
    while True:
        X = features(u, L, terms)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        if terms == 1 or np.linalg.matrix_rank(X) == terms:
            break
        terms -= 1
    pred = X @ coef
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return PrefillModel(tuple(float(c) for c in coef), r2, float(np.sqrt(ss_res / y.size)), int(y.size))
