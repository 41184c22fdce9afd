"""Prefill time at points the bundled H200 table does not hold, measured as the table was.

    python3 replay/gpu/prefill_holdout.py OUT.jsonl [--device cuda] [--models llama3_8b,qwen25_7b]

The method of shadow/data/h200_prefill.md: random bf16 weights with the model's shapes, Hugging
Face ``AutoModelForCausalLM`` with SDPA attention, eager, batch 1, last-token logits only; the
``cached`` tokens are put in the KV cache by a forward over them (cropped back after each timed
call); ``s`` is the median of 3 timed forwards of the ``new`` tokens after 1 warm-up (CUDA
synchronised wall clock), ``min_s`` and ``max_s`` beside it.  Each line also says its ``set``:
``holdout`` (a point the table does not hold: interpolated, or past its edge) or ``table`` (a
point of the table measured again: how far this run's GPU reproduces it).
``bench/profile_table.py --holdout OUT.jsonl`` compares them with the profile's values.

Needs torch and transformers only (no vLLM); about 3 minutes on one H200 for both models.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

#: The shapes h200_prefill.md gives.
SHAPES = {
    "llama3_8b": ("llama", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                                max_position_embeddings=131072, rope_theta=500000.0)),
    "qwen25_7b": ("qwen2", dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                                num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                                max_position_embeddings=131072, rope_theta=1000000.0)),
}
#: (cached, new) the table does not hold: within a row, between rows, below a row's smallest
#: new, past the largest new and the largest cached.
HOLDOUT = [(0, 128), (0, 768), (0, 3072), (0, 10240), (0, 24576), (0, 40960),
           (2048, 256), (2048, 1024), (2048, 4096), (4096, 64), (4096, 512), (6144, 1024),
           (8192, 2048), (12288, 512), (12288, 4096), (16384, 128), (16384, 2048),
           (22528, 1024), (28672, 8192), (32768, 1024)]
#: Points of the table, measured again.
TABLE = [(0, 256), (0, 512), (0, 1024), (0, 4096), (1024, 256), (1024, 4096), (8192, 1024),
         (28672, 4096)]
WARMUP, REPEATS = 1, 3


def build(name: str, device: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kind, shape = SHAPES[name]
    cfg = AutoConfig.for_model(kind, **shape)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    torch.set_default_dtype(torch.float32)
    return model.to(device=device, dtype=torch.bfloat16).eval()


def measure(model, c: int, n: int, device: str, vocab: int) -> list[float]:
    import torch

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    ids = torch.randint(0, vocab, (1, c + n), device=device)
    past = None
    if c:
        past = model(ids[:, :c], use_cache=True, logits_to_keep=1).past_key_values
    times = []
    for _ in range(WARMUP + REPEATS):
        sync()
        t0 = time.perf_counter()
        if c:
            model(ids[:, c:], past_key_values=past, use_cache=True, logits_to_keep=1)
        else:
            model(ids, use_cache=True, logits_to_keep=1)
        sync()
        times.append(time.perf_counter() - t0)
        if c:
            past.crop(c)
    return times[WARMUP:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default=",".join(SHAPES))
    ap.add_argument("--scale", type=int, default=1,
                    help="divide every token count by this (a flow check on a CPU)")
    args = ap.parse_args()
    import torch
    import transformers

    with open(args.out, "w") as f:
        env = {"env": True, "torch": torch.__version__, "transformers": transformers.__version__,
               "device": (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                          else args.device), "warmup": WARMUP, "repeats": REPEATS}
        f.write(json.dumps(env) + "\n")
        f.flush()
        for name in args.models.split(","):
            t0 = time.perf_counter()
            model = build(name, args.device)
            vocab = SHAPES[name][1]["vocab_size"]
            print(f"{name}: built in {time.perf_counter() - t0:.1f} s", flush=True)
            with torch.inference_mode():
                for which, pts in (("table", TABLE), ("holdout", HOLDOUT)):
                    for c, n in pts:
                        c, n = c // args.scale, max(n // args.scale, 1)
                        try:
                            ts = measure(model, c, n, args.device, vocab)
                        except Exception as exc:  # noqa: BLE001 - record it, measure the rest
                            row = {"model": name, "cached": c, "new": n, "set": which,
                                   "error": f"{type(exc).__name__}: {exc}"[:300]}
                        else:
                            row = {"model": name, "cached": c, "new": n,
                                   "s": statistics.median(ts), "min_s": min(ts),
                                   "max_s": max(ts), "set": which}
                        f.write(json.dumps(row) + "\n")
                        f.flush()
                        print(json.dumps(row), flush=True)
            del model
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
