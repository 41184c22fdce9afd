"""The prefill model: least squares recovers known coefficients; degenerate data falls back."""

from __future__ import annotations

import numpy as np
import pytest

from replay.prefill import fit_prefill
from shadow.errors import ShadowError


def test_recovers_coefficients():
    rng = np.random.default_rng(0)
    L = rng.integers(100, 4000, size=200).astype(float)
    c = np.floor(rng.random(200) * L / 32) * 32
    u = L - c
    a, b, d = 0.02, 3e-5, 4e-9
    y = a + b * u + d * u * (c + u / 2)
    m = fit_prefill(y, u, L)
    assert len(m.coef) == 3
    assert m.coef == pytest.approx((a, b, d), rel=1e-6)
    assert m.r2 == pytest.approx(1.0)
    assert m.predict([1000.0], [3000.0])[0] == pytest.approx(a + b * 1000 + d * 1000 * (2000 + 500))


def test_noise_gives_r2_below_one():
    rng = np.random.default_rng(1)
    u = rng.integers(1, 3000, size=300).astype(float)
    y = 0.01 + 2e-5 * u + rng.normal(0, 0.002, size=300)
    m = fit_prefill(y, u, u)
    assert 0.5 < m.r2 < 1.0 and m.rmse_s == pytest.approx(0.002, rel=0.2)
    assert m.coef[1] == pytest.approx(2e-5, rel=0.1)


def test_degenerate_data_falls_back():
    m = fit_prefill(np.array([0.1, 0.3]), np.array([100.0, 100.0]), np.array([100.0, 200.0]))
    assert len(m.coef) == 1 and m.coef[0] == pytest.approx(0.2)
    m2 = fit_prefill(np.array([0.1, 0.3, 0.5]), np.array([100.0, 200.0, 300.0]), np.array([100.0, 200.0, 300.0]))
    assert len(m2.coef) == 2 and m2.coef[1] == pytest.approx(0.002)
    with pytest.raises(ShadowError, match="at least 2"):
        fit_prefill(np.array([0.1]), np.array([1.0]), np.array([1.0]))
    with pytest.raises(ShadowError, match="differ in length"):
        fit_prefill(np.array([0.1, 0.2]), np.array([1.0]), np.array([1.0]))
