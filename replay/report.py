"""The validation report: the simulator's prediction against what the engine reported.

``build_report(results_dir)`` reads a replay's results, predicts every request's cached tokens
(:mod:`replay.predict`), compares them with ``usage.prompt_tokens_details.cached_tokens``, fits the
prefill model (:mod:`replay.prefill`) to the measured TTFT and applies it to every policy's
predicted hits.  It writes, next to the results (each to a temporary name, then renamed):

* ``report.json``: every number below, and the requests whose measurement and prediction differ;
* ``report.md``: the same for people;
* ``ttft_cdf.png``, ``cached_pred_vs_measured.png``, ``hit_ratio_over_time.png``.

Match rate = requests with ``measured == predicted`` over the requests that reached the engine and
reported cached tokens.

With a profile cost model (``--cost-model profile:FILE``, e.g. from ``replay --measure-profile``)
the report also predicts each request's TTFT from the profile at the shadow's predicted hit,
``t(c, N - c)`` (:func:`ttft_prediction`), and says its error per request and in total; and, to
tell the two apart, at the hit the engine reported.  One request at a time that is the whole
TTFT the profile measured; with requests in flight the measured TTFT also holds queueing, which
the prediction does not (the report says so).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from shadow.errors import ShadowError

from replay.prefill import fit_prefill
from replay.predict import Prediction, bound_cost, predict, predict_recorded
from replay.results import RequestResult, read_results, summarize
from shadow.atomic import atomic_path, atomic_write_text

logger = logging.getLogger(__name__)

PLOTS = ("ttft_cdf.png", "cached_pred_vs_measured.png", "hit_ratio_over_time.png")


def _engine_params(run: dict[str, Any], block_size: int | None, num_gpu_blocks: int | None,
                   tokens_per_block: int | None) -> tuple[int, int, int]:
    srv = run.get("server") or {}
    bs = block_size or srv.get("block_size") or run.get("engine_block_size")
    nb = num_gpu_blocks or srv.get("num_gpu_blocks") or run.get("num_gpu_blocks")
    tpb = tokens_per_block or run.get("tokens_per_block")
    missing = [n for n, v in (("--engine-block-size", bs), ("--num-gpu-blocks", nb),
                              ("--tokens-per-block", tpb)) if not v]
    if missing:
        raise ShadowError("the engine's capacity is unknown (the server did not report it): pass "
                          + ", ".join(missing))
    return int(bs), int(nb), int(tpb)


def compare(results: list[RequestResult], pred: Prediction) -> dict[str, Any]:
    rows, diffs = [], []
    n_cmp = n_match = n_model_match = 0
    for r in sorted(results, key=lambda r: r.seq):
        p = pred.cached.get(r.seq, {}).get("vllm")
        m = pred.model_cached.get(r.seq)
        row = {"seq": r.seq, "index": r.index, "prompt_tokens": r.prompt_tokens,
               "measured": r.cached_tokens, "predicted": p, "engine_model": m, "error": r.error}
        rows.append(row)
        if r.cached_tokens is None or (p is None and m is None):
            continue
        n_cmp += 1
        ref = p if p is not None else m
        if ref == r.cached_tokens:
            n_match += 1
        else:
            diffs.append(row)
        if m is not None and m == r.cached_tokens:
            n_model_match += 1
    return {"n_compared": n_cmp, "n_match": n_match,
            "match_rate": (n_match / n_cmp) if n_cmp else None,
            "engine_model_match_rate": (n_model_match / n_cmp) if n_cmp else None,
            "differing": diffs, "rows": rows}


def policy_table(results: list[RequestResult], pred: Prediction, model) -> list[dict[str, Any]]:
    """Per policy: token hit ratio and the TTFT the fitted prefill model predicts."""
    reqs = [r for r in results if r.seq in pred.cached]
    if not reqs:
        return []
    N = np.array([r.prompt_tokens for r in reqs], dtype=np.float64)
    base = model.predict(N, N) - model.coef[0] if model else None
    out = []
    measured = [r for r in reqs if r.cached_tokens is not None]
    rows: list[tuple[str, np.ndarray]] = [(p, np.array([pred.cached[r.seq][p] for r in reqs], dtype=np.float64))
                                          for p in pred.policies]
    if measured and len(measured) == len(reqs):
        rows.insert(0, ("measured", np.array([r.cached_tokens for r in reqs], dtype=np.float64)))
    for name, c in rows:
        row: dict[str, Any] = {"policy": name, "hit_ratio": float(c.sum() / N.sum()) if N.sum() else None}
        if model is not None:
            t = model.predict(N - c, N)
            row.update({"ttft_mean_s": float(t.mean()), "ttft_p50_s": float(np.percentile(t, 50)),
                        "ttft_p90_s": float(np.percentile(t, 90)),
                        "prefill_saving": float(1.0 - (t - model.coef[0]).sum() / base.sum())
                        if base.sum() > 0 else None})
        out.append(row)
    return out


def _errors(pred: np.ndarray, meas: np.ndarray) -> dict[str, Any]:
    """Per-request and total error of predicted against measured seconds."""
    err = pred - meas
    rel = err / meas
    tot_p, tot_m = float(pred.sum()), float(meas.sum())
    return {"total_predicted_s": tot_p, "total_measured_s": tot_m,
            "total_error": (tot_p - tot_m) / tot_m if tot_m > 0 else None,
            "mean_abs_error_s": float(np.abs(err).mean()),
            "mean_abs_rel_error": float(np.abs(rel).mean()),
            "rms_rel_error": float(np.sqrt((rel ** 2).mean())),
            "largest_abs_rel_error": float(np.abs(rel).max())}


def ttft_prediction(results: list[RequestResult], pred: Prediction, cost,
                    concurrency: int | None) -> dict[str, Any] | None:
    """Each request's TTFT from the profile (``cost.profile``) at the shadow's predicted hit
    (its ``vllm`` cache) and at the engine's measured hit, against the measured TTFT: per
    request and in total.  None without a profile or without a request to compare."""
    from shadow.sim.engine.rules import prefill_cached_tokens

    prof = getattr(cost, "profile", None)
    if prof is None:
        return None
    reqs = sorted((r for r in results if r.ok and r.ttft_s is not None and r.seq in pred.cached
                   and "vllm" in pred.cached[r.seq]), key=lambda r: r.seq)
    if not reqs:
        return None
    N = np.array([r.prompt_tokens_reported or r.prompt_tokens for r in reqs], dtype=np.int64)
    meas = np.array([r.ttft_s for r in reqs], dtype=np.float64)
    c = prefill_cached_tokens(N, np.array([pred.cached[r.seq]["vllm"] for r in reqs]), 1)
    t = prof.seconds(c, N - c)
    out: dict[str, Any] = {
        "profile": cost.name, "n": len(reqs),
        "one_at_a_time": concurrency == 1,
        "at_predicted_hit": _errors(t, meas)}
    rows = [{"seq": r.seq, "index": r.index, "prompt_tokens": int(n), "predicted_cached": int(cc),
             "measured_cached": r.cached_tokens, "measured_s": float(m), "predicted_s": float(p),
             "error_s": float(p - m)} for r, n, cc, m, p in zip(reqs, N, c, meas, t)]
    have = [k for k, r in enumerate(reqs) if r.cached_tokens is not None]
    if have:
        Nm = N[have]
        cm = prefill_cached_tokens(Nm, np.array([reqs[k].cached_tokens for k in have]), 1)
        tm = prof.seconds(cm, Nm - cm)
        out["at_measured_hit"] = _errors(tm, meas[have])
        for k, v in zip(have, tm.tolist()):
            rows[k]["at_measured_hit_s"] = v
    out["requests"] = rows
    return out


def _plots(d: Path, results: list[RequestResult], pred: Prediction, model) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(fig, name: str) -> None:
        try:
            with atomic_path(d / name, suffix=".png") as tmp:
                fig.savefig(tmp, dpi=100)
        finally:
            plt.close(fig)
        written.append(name)

    ok = [r for r in results if r.ok and r.ttft_s is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    if ok:
        t = np.sort([r.ttft_s * 1e3 for r in ok])
        ax.step(t, np.arange(1, t.size + 1) / t.size, where="post", label="measured", lw=2)
    if model is not None:
        reqs = [r for r in results if r.seq in pred.cached]
        N = np.array([r.prompt_tokens for r in reqs], dtype=np.float64)
        for p in pred.policies:
            c = np.array([pred.cached[r.seq][p] for r in reqs], dtype=np.float64)
            t = np.sort(model.predict(N - c, N) * 1e3)
            if t.size:
                ax.step(t, np.arange(1, t.size + 1) / t.size, where="post", label=f"model: {p}", lw=1)
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, PLOTS[0])

    pairs = [(r.cached_tokens, pred.cached[r.seq]["vllm"]) for r in results
             if r.cached_tokens is not None and r.seq in pred.cached]
    fig, ax = plt.subplots(figsize=(5, 5))
    if pairs:
        m, p = np.array(pairs, dtype=np.float64).T
        ax.scatter(m, p, s=12, alpha=0.7)
        hi = max(1.0, float(max(m.max(), p.max())))
        ax.plot([0, hi], [0, hi], "k--", lw=1)
    ax.set_xlabel("measured cached tokens")
    ax.set_ylabel("predicted cached tokens (vllm policy)")
    ax.set_title("predicted vs measured")
    ax.grid(alpha=0.3)
    save(fig, PLOTS[1])

    reqs = sorted((r for r in results if r.seq in pred.cached and r.sent_s is not None),
                  key=lambda r: r.sent_s)
    fig, ax = plt.subplots(figsize=(6, 4))
    if reqs:
        ts = np.array([r.sent_s for r in reqs])
        N = np.cumsum([r.prompt_tokens for r in reqs])
        if all(r.cached_tokens is not None for r in reqs):
            ax.plot(ts, np.cumsum([r.cached_tokens for r in reqs]) / N, label="measured", lw=2)
        for p in pred.policies:
            ax.plot(ts, np.cumsum([pred.cached[r.seq][p] for r in reqs]) / N, label=f"predicted: {p}", lw=1)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("cumulative hit ratio (tokens)")
    ax.set_title("hit ratio over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, PLOTS[2])
    return written


def _md(rep: dict[str, Any]) -> str:
    v = rep["validation"]
    lines = ["# Replay validation report", "",
             f"- results: `{rep['results']}`",
             f"- engine: block size {rep['block_size']}, {rep['num_gpu_blocks']} KV blocks "
             f"(capacity {rep['capacity_blocks']}), {rep['tokens_per_block']} tokens per trace block",
             f"- requests: {rep['summary']['n_requests']} sent, {rep['summary']['n_ok']} ok, "
             f"{rep['summary']['n_errors']} errors",
             f"- prediction: {rep.get('prediction', 'send order')}", ""]
    if v["match_rate"] is None:
        lines.append("No request reported cached tokens: start the server with "
                     "`--enable-prompt-tokens-details`.")
    else:
        lines.append(f"**Cached tokens: {v['n_match']} of {v['n_compared']} requests match the "
                     f"prediction (match rate {v['match_rate']:.4f}; engine model "
                     + (f"{v['engine_model_match_rate']:.4f}" if v["engine_model_match_rate"]
                        is not None and rep.get("prediction", "send order") == "send order"
                        else "not run") + ").**")
    if v["differing"]:
        lines += ["", "| seq | trace index | prompt tokens | measured | predicted | engine model |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for d in v["differing"][:50]:
            lines.append(f"| {d['seq']} | {d['index']} | {d['prompt_tokens']} | {d['measured']} | "
                         f"{d['predicted']} | {d['engine_model']} |")
    lines += ["", "## Prefill model", "", rep["prefill_model"]["text"] if rep["prefill_model"] else
              "not fitted (too few measured requests)", ""]
    if rep["policies"]:
        lines += ["| policy | hit ratio | TTFT mean (ms) | p50 | p90 | prefill saving |",
                  "|---|---:|---:|---:|---:|---:|"]
        for p in rep["policies"]:
            f = (lambda k, p=p: f"{p[k] * 1e3:.1f}" if p.get(k) is not None else "-")
            ps = f"{p['prefill_saving']:.4f}" if p.get("prefill_saving") is not None else "-"
            hr = f"{p['hit_ratio']:.4f}" if p["hit_ratio"] is not None else "-"
            lines.append(f"| {p['policy']} | {hr} | {f('ttft_mean_s')} | {f('ttft_p50_s')} | "
                         f"{f('ttft_p90_s')} | {ps} |")
    tp = rep.get("ttft_prediction")
    if tp:
        lines += ["", "## TTFT from the profile", "",
                  f"Each request's TTFT predicted as the profile's prefill time `t(c, N - c)` "
                  f"(`{tp['profile']}`) at the shadow's predicted hit c (its `vllm` cache), and "
                  f"at the hit the engine reported, against the measured TTFT ({tp['n']} "
                  f"requests)." + ("" if tp["one_at_a_time"] else
                                   " **The run was not one request at a time: the measured TTFT "
                                   "holds queueing, the prediction does not.**"), "",
                  "| at | total measured (s) | total predicted (s) | total error | mean abs error "
                  "(ms) | mean abs relative error | RMS relative error | largest |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for key, name in (("at_predicted_hit", "the shadow's predicted hit"),
                          ("at_measured_hit", "the engine's measured hit")):
            e = tp.get(key)
            if e:
                lines.append(f"| {name} | {e['total_measured_s']:.4f} | "
                             f"{e['total_predicted_s']:.4f} | {e['total_error']:+.2%} | "
                             f"{e['mean_abs_error_s'] * 1e3:.2f} | {e['mean_abs_rel_error']:.2%} | "
                             f"{e['rms_rel_error']:.2%} | {e['largest_abs_rel_error']:.2%} |")
        lines += ["", "| seq | prompt tokens | cached (predicted) | measured TTFT (ms) | predicted "
                  "(ms) | error (ms) |", "|---:|---:|---:|---:|---:|---:|"]
        for row in tp["requests"][:50]:
            lines.append(f"| {row['seq']} | {row['prompt_tokens']} | {row['predicted_cached']} | "
                         f"{row['measured_s'] * 1e3:.1f} | {row['predicted_s'] * 1e3:.1f} | "
                         f"{row['error_s'] * 1e3:+.1f} |")
    if rep["skipped_policies"]:
        lines += ["", "Not run: " + ", ".join(f"{k} ({v})" for k, v in rep["skipped_policies"].items())]
    lines += ["", "Plots: " + ", ".join(f"`{p}`" for p in rep["plots"]), ""]
    return "\n".join(lines)


def build_report(path: str | Path, *, block_size: int | None = None, num_gpu_blocks: int | None = None,
                 tokens_per_block: int | None = None, policies: list[str] | None = None,
                 cost_model: str = "uniform", plots: bool = True,
                 recording: str | None = None) -> dict[str, Any]:
    """The validation report of the results at ``path``; with ``recording`` (the engine's own
    connector recording) the prediction serves it with ``--timing recorded``
    (:func:`replay.predict.predict_recorded`) instead of replaying the requests in send order."""
    d, run, results = read_results(path)
    bs, nb, tpb = _engine_params(run, block_size, num_gpu_blocks, tokens_per_block)
    cost = bound_cost(cost_model, bs)
    if recording is not None:
        pred = predict_recorded(results, str(recording), block_size=bs, num_gpu_blocks=nb,
                                policies=policies, cost_model=cost)
    else:
        pred = predict(results, tokens_per_block=tpb, block_size=bs, num_gpu_blocks=nb,
                       policies=policies, cost_model=cost)
    val = compare(results, pred)
    ok = [r for r in results if r.ok and r.ttft_s is not None and r.cached_tokens is not None]
    model = None
    if len(ok) >= 2:
        try:
            model = fit_prefill(np.array([r.ttft_s for r in ok]),
                                np.array([r.prompt_tokens - r.cached_tokens for r in ok]),
                                np.array([r.prompt_tokens for r in ok]))
        except ShadowError as exc:
            logger.warning("%s", exc)
    rep: dict[str, Any] = {
        "results": str(d), "block_size": bs, "num_gpu_blocks": nb, "capacity_blocks": pred.capacity_blocks,
        "tokens_per_block": tpb, "summary": summarize(results),
        "prediction": ("send order" if recording is None
                       else f"the engine's recording {recording}, --timing recorded"),
        "validation": {k: v for k, v in val.items() if k != "rows"},
        "requests": val["rows"],
        "prefill_model": None if model is None else {
            "coef": list(model.coef), "r2": model.r2, "rmse_s": model.rmse_s, "n": model.n,
            "text": model.describe()},
        "policies": policy_table(results, pred, model),
        "skipped_policies": pred.skipped_policies,
        "simulator_result_lines": pred.result_lines,
        "ttft_prediction": ttft_prediction(results, pred, cost,
                                           (run.get("timing") or {}).get("concurrency")),
        "plots": [],
    }
    if plots:
        rep["plots"] = _plots(d, results, pred, model)
    atomic_write_text(d / "report.json", json.dumps(rep, indent=2, sort_keys=True) + "\n")
    atomic_write_text(d / "report.md", _md(rep))
    return rep


def report_text(rep: dict[str, Any]) -> str:
    return _md(rep)
