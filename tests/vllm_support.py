"""Shared helpers for tests that run a real vLLM engine on the CPU (``@pytest.mark.vllm``).

Owned by the connector room; used by the connector, replay and deploy tests.  Everything here
builds real things (a real, randomly initialised model, a real OpenAI server process); nothing
is mocked.  See ``../shared/notes/vllm-on-cpu.md`` for why the settings below are what they are.

Usage::

    from tests.vllm_support import (tiny_model_path, llm_kwargs, free_port,
                                    start_openai_server, vllm_available)

    pytestmark = [pytest.mark.vllm,
                  pytest.mark.skipif(not vllm_available(), reason="vllm not installed")]

    def test_x():
        model = tiny_model_path()            # built once per test session (~6 s)
        with start_openai_server(model, extra_args=["--enable-prompt-tokens-details"]) as url:
            requests.get(url + "/health")    # url is e.g. "http://127.0.0.1:40123"

NOTE: the machine is shared; run vLLM tests under ``flock /tmp/vllm.lock`` so that only one
engine runs at a time.  The helpers do not take the lock themselves: a child process taking it
while the pytest process holds it would deadlock.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from replay.server import free_port, stop_process_group

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Tokens of the tiny model's vocabulary: ``TINY_VOCAB_SIZE`` ids in all, the first four special.
TINY_VOCAB_SIZE = 1000
TINY_SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
#: Token ids safe to put in a prompt (no special tokens).
TINY_FIRST_WORD_ID = len(TINY_SPECIAL_TOKENS)

#: Block size every test engine uses (the CPU attention backend needs a multiple of 32).
BLOCK_SIZE = 32


def vllm_available() -> bool:
    """True when ``import vllm`` would succeed (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


# ---------------------------------------------------------------------------------------------
# The tiny model
# ---------------------------------------------------------------------------------------------

def build_tiny_model(directory: str | os.PathLike, *, seed: int = 0) -> str:
    """Build a randomly initialised tiny Llama plus an offline WordLevel tokenizer in ``directory``.

    2 layers, hidden 128, 4 heads of head_dim 32 (the CPU backend's smallest), vocab 1000,
    float32, saved with ``save_pretrained``.  Deterministic for a given ``seed``.  Returns the
    directory as a string (what ``LLM(model=...)`` and ``--model`` take).
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)

    vocab = {tok: i for i, tok in enumerate(TINY_SPECIAL_TOKENS)}
    for i in range(len(vocab), TINY_VOCAB_SIZE):
        vocab[f"w{i}"] = i
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="<pad>", model_max_length=4096)
    tokenizer.save_pretrained(out)

    config = LlamaConfig(
        vocab_size=TINY_VOCAB_SIZE, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=32,
        max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=3,
        tie_word_embeddings=False, torch_dtype="float32")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    return str(out)


_tiny_lock = threading.Lock()
_tiny_path: str | None = None


def tiny_model_path() -> str:
    """The tiny model, built once per test session (process) and reused.

    Built into a temporary directory removed at interpreter exit.  Set ``SHADOW_TINY_MODEL`` to a
    directory to build (once) and keep it there across sessions instead.
    """
    global _tiny_path
    with _tiny_lock:
        if _tiny_path is not None:
            return _tiny_path
        keep = os.environ.get("SHADOW_TINY_MODEL")
        if keep:
            if not (Path(keep) / "config.json").exists() or not (
                    Path(keep) / "tokenizer.json").exists():
                tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=Path(keep).parent))
                build_tiny_model(tmp)
                with contextlib.suppress(OSError):
                    os.rename(tmp, keep)  # NOTE: atomic; a concurrent builder may win
                shutil.rmtree(tmp, ignore_errors=True)
            _tiny_path = str(keep)
        else:
            d = tempfile.mkdtemp(prefix="shadow-tiny-llama-")
            atexit.register(shutil.rmtree, d, True)
            _tiny_path = build_tiny_model(d)
        return _tiny_path


def word_prompt(token_ids: Sequence[int]) -> str:
    """The text whose tokenization is exactly ``token_ids`` (word ids of the tiny vocabulary)."""
    return " ".join(f"w{i}" for i in token_ids)


def random_token_ids(n: int, seed: int) -> list[int]:
    """``n`` deterministic non-special token ids of the tiny vocabulary."""
    import random

    rng = random.Random(seed)
    return [rng.randrange(TINY_FIRST_WORD_ID, TINY_VOCAB_SIZE) for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# In-process engines
# ---------------------------------------------------------------------------------------------

def set_inprocess_env(kv_cache_gib: int = 1) -> None:
    """Environment for an in-process engine (call before ``vllm.LLM(...)``).

    ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: engine core and worker run in the calling process
    (start-up 3-5 s instead of 20-25 s), so a connector's scheduler-side instance is reachable
    from the test.
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def llm_kwargs(model: str, **overrides) -> dict:
    """Keyword arguments for ``vllm.LLM`` that work on the CPU build with the tiny model.

    Prefix caching on, block size 32, float32, eager, one in-process worker, stats on (so that
    ``llm.get_metrics()`` and the connector-stats path work).  ``overrides`` win.
    """
    kw = dict(model=model, dtype="float32", enforce_eager=True, block_size=BLOCK_SIZE,
              enable_prefix_caching=True, max_model_len=2048, max_num_seqs=8,
              distributed_executor_backend="uni", disable_log_stats=False, seed=0)
    kw.update(overrides)
    return kw


@contextlib.contextmanager
def inprocess_llm(model: str, **overrides) -> Iterator["object"]:
    """A ``vllm.LLM`` in this process, shut down at exit (see :func:`llm_kwargs`)."""
    set_inprocess_env()
    from vllm import LLM

    llm = LLM(**llm_kwargs(model, **overrides))
    try:
        yield llm
    finally:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        import gc

        gc.collect()


# ---------------------------------------------------------------------------------------------
# The OpenAI server
# ---------------------------------------------------------------------------------------------

class ServerURL(str):
    """The server's base URL (``http://127.0.0.1:PORT``), carrying its process and log file."""

    proc: subprocess.Popen
    log_path: Path
    port: int

    def log_tail(self, n_chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return ""


DEFAULT_SERVER_ARGS = ("--dtype", "float32", "--enforce-eager", "--block-size", str(BLOCK_SIZE),
                       "--enable-prefix-caching", "--max-model-len", "2048",
                       "--max-num-seqs", "8")


def wait_for_health(proc: subprocess.Popen, url: str, log_path: Path, timeout_s: float, *,
                    what: str, poll_s: float) -> None:
    """Poll ``url``/health until it answers 200; a process that exits first or a deadline
    passed raises with the log's tail."""
    def tail() -> str:
        try:
            return log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} during start-up; "
                               f"log {log_path}:\n{tail()}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer /health within {timeout_s:.0f} s; "
                               f"log {log_path}:\n{tail()}")
        time.sleep(poll_s)


@contextlib.contextmanager
def start_openai_server(model_path: str, extra_args: Sequence[str] = (),
                        env: Mapping[str, str] | None = None, *, port: int | None = None,
                        startup_timeout_s: float = 240.0,
                        log_dir: str | os.PathLike | None = None,
                        defaults: Sequence[str] = DEFAULT_SERVER_ARGS) -> Iterator[ServerURL]:
    """Run ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 and yield its base URL.

    The server gets the CPU defaults in ``defaults`` (``DEFAULT_SERVER_ARGS``; later
    ``extra_args`` win, as argparse keeps the last value), the repo root on ``PYTHONPATH`` (so
    ``kv_connector_module_path: shadow.connector`` imports), ``VLLM_CPU_KVCACHE_SPACE=1`` and
    ``env`` on top.  It runs in its own process group; at exit the whole group gets SIGTERM
    (then SIGKILL after a grace period), even if the test failed or the server died.  If /health
    does not answer within ``startup_timeout_s`` or the process exits, RuntimeError carries the
    tail of the server log.  The yielded :class:`ServerURL` also has ``.proc``, ``.port``,
    ``.log_path`` and ``.log_tail()``.
    """
    port = port or free_port()
    full_env = dict(os.environ)
    full_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # an in-process test may have set it
    full_env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    full_env["TOKENIZERS_PARALLELISM"] = "false"
    pp = full_env.get("PYTHONPATH")
    full_env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    full_env.update(env or {})
    log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="vllm-server-log-"))
    log_path = log_dir / f"server-{port}.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
           "--host", "127.0.0.1", "--port", str(port), *defaults, *extra_args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                cwd=str(REPO_ROOT), start_new_session=True)
    url = ServerURL(f"http://127.0.0.1:{port}")
    url.proc, url.log_path, url.port = proc, log_path, port
    try:
        wait_for_health(proc, url, log_path, startup_timeout_s, what="vLLM server", poll_s=0.5)
        yield url
    finally:
        stop_process_group(proc, grace_s=15.0)


def wait_for_exit(proc: subprocess.Popen, timeout_s: float = 30.0) -> int | None:
    """Wait for ``proc`` to exit; its return code, or None if it is still running."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def http_get(url: str, timeout_s: float = 10.0) -> str:
    """GET ``url`` and return the body as text (raises on a non-2xx status)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode()


def http_post_json(url: str, payload: dict, timeout_s: float = 120.0,
                   headers: Mapping[str, str] | None = None) -> dict:
    """POST ``payload`` as JSON to ``url``; the decoded JSON answer."""
    import json

    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.loads(r.read().decode())


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse a Prometheus text exposition into ``{(name, sorted label pairs): value}``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def metric_sum(parsed: Mapping[tuple[str, tuple], float], name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    total = 0.0
    for (n, lab), v in parsed.items():
        if n == name and all(dict(lab).get(k) == val for k, val in labels.items()):
            total += v
    return total


class StoppedClient:
    """Completions sent to an OpenAI server that is stopped while they run: the prompt lengths
    of the requests that completed (``done``) and of those the stop cut off (``failed``).  The
    prompts of one test have distinct lengths, so a length names a request."""

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url, model
        self.done: list[int] = []
        self.failed: list[int] = []

    def send(self, prompt: Sequence[int], k: int, timeout_s: float = 180.0) -> None:
        """One request of ``k`` output tokens; returns when it completed or was cut off."""
        try:
            out = http_post_json(self.url + "/v1/completions",
                                 {"model": self.model, "prompt": list(prompt), "max_tokens": k,
                                  "min_tokens": k, "ignore_eos": True, "temperature": 0},
                                 timeout_s=timeout_s)
        except Exception:  # noqa: BLE001 - refused once the server stops
            self.failed.append(len(prompt))
            return
        # NOTE: a request the stop caught answers 200 with finish_reason "abort"
        if out["choices"][0]["finish_reason"] == "abort":
            self.failed.append(len(prompt))
        else:
            assert out["usage"]["completion_tokens"] == k
            self.done.append(len(prompt))

    def start(self, prompts: Sequence[Sequence[int]], k: int) -> list[threading.Thread]:
        """``prompts`` sent at once, one thread each; returns once the engine runs one."""
        threads = [threading.Thread(target=self.send, args=(p, k)) for p in prompts]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while metric_sum(parse_prometheus(http_get(self.url + "/metrics")),
                         "vllm:num_requests_running") < 1:
            assert time.monotonic() < deadline, "no request ever ran"
            time.sleep(0.05)
        return threads

    def check_recorded(self, lengths: Sequence[int]) -> None:
        """The recording's input lengths: every completed request once, the cut-off ones at
        most once (only those the engine had when the stop came), nothing else."""
        assert len(lengths) == len(set(lengths))
        assert sorted(n for n in lengths if n in self.done) == sorted(self.done)
        assert set(lengths) <= set(self.done) | set(self.failed)


def convert_quietly(directory: str | os.PathLike, out: str | os.PathLike) -> tuple[str, list[int]]:
    """``shadow convert DIRECTORY OUT``, which must succeed without a word on stderr (no
    warning); its one-line summary and the input length of every request it wrote."""
    from shadow.trace import open_trace

    r = subprocess.run([sys.executable, "-m", "shadow", "convert", str(directory), str(out)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with open_trace(str(out)) as tr:
        return r.stdout, [int(x) for b in tr for x in b.records["input_length"]]


# ---------------------------------------------------------------------------------------------
# The engine's block pool against the shadow's
# ---------------------------------------------------------------------------------------------

def engine_block_pool(llm):
    """vLLM's ``BlockPool`` of an in-process engine, or None where this vLLM lays it out otherwise."""
    try:
        return llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool
    except AttributeError:
        return None


def compare_pools(pool, conn, key: str) -> str:
    """'' when the shadow ``vllm`` cache ``key`` is the engine's block pool, block for block.

    Compared: which hashes are cached and in which physical blocks (copies included, oldest
    first), and the whole free queue (physical ids from the next block allocated on, and the
    hashes its cached blocks hold).  Engine keys are hash + 4 bytes of group id; the shadow's
    ids map back to hashes through the connector's interner.
    """
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    worker = conn._worker
    shadow = conn.pool(key)
    h2id = dict(worker.interner._old)
    h2id.update(worker.interner._cur)
    engine_cached: dict[int, list[int]] = {}
    for k, v in pool.cached_block_hash_to_block._cache.items():
        blocks = [v] if isinstance(v, KVCacheBlock) else list(v.values())
        engine_cached[h2id.get(k[:-4], -1)] = [b.block_id for b in blocks]
    shadow_cached = shadow.cached_blocks()
    if engine_cached != shadow_cached:
        only_e = {h: c for h, c in engine_cached.items() if shadow_cached.get(h) != c}
        only_s = {h: c for h, c in shadow_cached.items() if engine_cached.get(h) != c}
        return f"cached blocks differ: engine {only_e}, shadow {only_s}"
    free = pool.free_block_queue.get_all_free_blocks()
    engine_free = [b.block_id for b in free]
    if engine_free != shadow.free_blocks():
        return f"free queue differs: engine {engine_free}, shadow {shadow.free_blocks()}"
    engine_queue = [h2id.get(b.block_hash[:-4], -1) for b in free if b.block_hash is not None]
    if engine_queue != shadow.free_queue():
        return f"eviction order differs: engine {engine_queue}, shadow {shadow.free_queue()}"
    return ""


def serve_like_vllm(requests, capacity: int, block_size: int = BLOCK_SIZE) -> list[int]:
    """Each request's prefix-hit tokens (vLLM's ``num_cached_tokens``) when ``requests`` are
    served one at a time by the simulator's ``vllm`` cache of ``capacity`` blocks, matching as
    vLLM does.

    ``requests``: ``(input_length, output_length, block ids)`` in serving order, as a recording
    holds them: the first ``floor(input_length / B)`` ids are the prompt (admitted, looked up up
    to ``floor((N-1)/B)``), the rest are the generated blocks, inserted when it finishes with the
    final partial block held meanwhile (as the live shadow does).
    """
    from shadow.sim import CacheSpec, Simulator
    from shadow.sim.engine.rules import partial_tail_blocks

    b = block_size
    sim = Simulator([CacheSpec("vllm", capacity)], pin=True, verify=False)
    hits: list[int] = []
    for n, m, ids in requests:
        ids = list(map(int, ids))
        n_prompt = min(len(ids), n // b)
        adm = sim.admit(ids[:n_prompt], n_match=max(n - 1, 0) // b,
                        n_anonymous=1 if n % b else 0)
        hits.append(adm.prefix_hits[0] * b)
        # NOTE: the engine computed n + m - 1 tokens (never the last sampled one)
        sim.release(adm, ids[n_prompt:],
                    n_anonymous_final=partial_tail_blocks(n + m - 1, len(ids), b))
    return hits
