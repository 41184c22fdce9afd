"""``ShadowConnector``: a pure observer on vLLM's KV connector API (vLLM >= 0.27, < 0.34).

Loaded with::

    --kv-transfer-config '{"kv_connector": "ShadowConnector",
                           "kv_connector_module_path": "shadow.connector",
                           "kv_role": "kv_producer", "kv_connector_extra_config": {...}}'

or by name (``"kv_connector": "ShadowConnector"`` without a module path, e.g. inside a
MultiConnector) once the ``vllm.general_plugins`` entry point has registered it.

It never changes what the engine does: no external tokens (``(0, False)``), no delayed frees,
``requires_kv_delivery`` False, an empty metadata object, and a worker side that does nothing.
It subclasses ``SupportsHMA`` so hybrid models keep their KV cache manager.

Scheduler-side flow (engine-core process, one instance per engine / DP rank):

* ``get_num_new_matched_tokens(req, local_hit)``: remember the engine's block-aligned local hit
  (may repeat; idempotent).
* ``update_state_after_alloc``: the request is admitted: copy its block hashes into this
  step's admissions.
* ``build_connector_meta``: queue the step (:class:`shadow.connector.worker.Step`): the running
  requests' growth (references to the scheduler output's lists), the preemptions and the
  admissions, which the worker replays in vLLM's order.
* ``request_finished*``: queue a release with the blocks of generated tokens (hashed by vLLM up
  to ``num_computed_tokens``), then the worker frees and records the request.

Every hook catches its exceptions, counts them in ``shadow_errors_total`` and logs once; nothing
raises into the engine.  Bad configuration raises :class:`shadow.errors.ShadowError` from the
constructor, i.e. at start-up.
"""

from __future__ import annotations

import logging
import multiprocessing.util
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import vllm
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                               KVConnectorMetadata,
                                                               KVConnectorRole, SupportsHMA)
try:
    from vllm.v1.core.kv_cache_utils import generate_block_hash_extra_keys
except ImportError:  # NOTE: a vLLM without it: blocks keyed by tokens and parent alone
    generate_block_hash_extra_keys = None

from shadow.connector.config import ShadowConfig, parse_extra_config, record_dir_of
from shadow.connector.metrics import (ShadowCollector, ShadowPromMetrics, ShadowStats,
                                      start_endpoint)
from shadow.connector.schema import PayloadDelta, cumulative_payload, empty_payload
from shadow.connector.worker import Admit, Preempt, Prediction, Release, Reset, ShadowWorker, Step
from shadow.errors import ShadowError
from shadow.sim.engine.rules import full_blocks, max_hit_blocks, partial_tail_blocks

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)

SUPPORTED_VLLM = ((0, 27), (0, 34))  # [min, max)

#: Live scheduler-side instances in this process (tests read predictions through these).
INSTANCES: "weakref.WeakSet[ShadowConnector]" = weakref.WeakSet()


def _version_tuple(v: str) -> tuple[int, int]:
    parts = []
    for p in v.split(".")[:2]:
        num = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(num) if num else 0)
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def kv_bytes_per_block(kv_cache_config: Any) -> int | None:
    """Bytes of one engine KV block on this rank, as vLLM 0.32's ``OffloadingConnector`` sizes
    its host blocks (``build_offloading_config`` in
    ``distributed/kv_transfer/kv_connector/v1/offloading/config.py``): the size of the one
    backing KV allocation over ``num_blocks`` when the config has tensors, else per cache group
    its spec's ``page_size_bytes`` (layers x KV heads x head size x dtype bytes x block size,
    keys and values) times its layers (a ``UniformTypeKVCacheSpecs`` covers them all).  None
    when neither is there (the ``bytes_per_block`` key then gives it)."""
    try:
        n = int(getattr(kv_cache_config, "num_blocks", 0) or 0)
        tensors = getattr(kv_cache_config, "kv_cache_tensors", None)
        if n > 0 and tensors and getattr(kv_cache_config, "hisparse_host_num_blocks", None) is None:
            return int(tensors[0].size) // n or None
        from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs

        total = 0
        for group in kv_cache_config.kv_cache_groups:
            spec = group.kv_cache_spec
            total += (spec.page_size_bytes if isinstance(spec, UniformTypeKVCacheSpecs)
                      else spec.page_size_bytes * len(group.layer_names))
        return total or None
    except (AttributeError, TypeError, ValueError, ImportError):
        return None


def _extra_keys(request: "Request", start: int, end: int) -> Any:
    """vLLM's extra keys of the block ``start:end`` of ``request`` (LoRA, multimodal items, cache
    salt, prompt embeddings), as its block hasher takes them (``kv_cache_utils``): the block
    keys cover exactly what vLLM's block hash covers (shadow.connector.blockkey).  NOTE: from the
    first multimodal item on (``start_mm_idx`` 0): items that end before the block are passed
    over, so the keys equal the hasher's, which starts from the item it reached."""
    if generate_block_hash_extra_keys is None:
        return None
    return generate_block_hash_extra_keys(request, start, end, 0)[0]


#: multiprocessing exit finalizers at or above 0 run first, before children are joined.
EXIT_PRIORITY = 10
#: Seconds a closing worker may take to serve what is queued before the segment is finished.
EXIT_FLUSH_S = 5.0


def _close_worker(worker: ShadowWorker) -> None:
    """The exit hook: stop the worker, close the recording (never raises)."""
    try:
        worker.stop(EXIT_FLUSH_S)
    except Exception:  # noqa: BLE001 - at exit: log, never raise
        logger.exception("shadow connector: closing the worker at exit failed")


_SEALING: set[str] = set()


#: One seal at a time in this process (NOTE: the exit seal waits for the watching thread's, which
#: the interpreter would otherwise stop midway at exit).
_SEAL_LOCK = threading.Lock()


def _seal(directory: str) -> None:
    from shadow.trace.segments import seal_orphans

    try:
        with _SEAL_LOCK:
            if os.path.isdir(directory):
                seal_orphans(directory)
    except Exception:  # noqa: BLE001 - at exit: log, never raise
        logger.exception("shadow connector: sealing the recording in %s failed", directory)


def seal_orphans_of(vllm_config: "VllmConfig") -> None:
    """In the frontend (API server) process: seal the recording's orphaned segments
    (:func:`shadow.trace.segments.seal_orphans`) as soon as the engine core writing one is gone
    (:func:`shadow.trace.segments.seal_when_gone` in a thread), and again when this process exits.

    NOTE: on SIGTERM or SIGINT the API server stops its engine cores with vLLM's
    ``--shutdown-timeout`` (default 0): SIGTERM, then at once SIGKILL
    (``vllm/v1/utils.py`` ``shutdown``), so an engine core cannot finish its segment itself.  The
    frontend outlives it: the engine core's stream lock is free and its ``.partial`` is sealed
    here under its final name.  Not only at the frontend's exit: with requests in flight vLLM's
    HTTP server may wait for their connections to close, and a supervisor's SIGKILL after its
    grace period would then find the segment unsealed.  Runs once per directory; a stream a
    live process still writes is left alone.
    """
    try:
        ktc = vllm_config.kv_transfer_config
        extra = getattr(ktc, "kv_connector_extra_config", None) or {}
        directory = record_dir_of(extra)
        if directory is None or extra.get("enabled", True) is False or directory in _SEALING:
            return
        _SEALING.add(directory)
        from shadow.trace.segments import seal_when_gone

        threading.Thread(target=seal_when_gone, args=(directory, threading.Event()),
                         kwargs={"seal": lambda: _seal(directory)}, name="shadow-seal",
                         daemon=True).start()
        multiprocessing.util.Finalize(None, _seal, args=(directory,), exitpriority=EXIT_PRIORITY)
    except Exception as exc:  # noqa: BLE001 - metrics set-up must not fail because of this
        logger.warning("shadow connector: the recording will not be sealed: %r", exc)


class ShadowConnectorMetadata(KVConnectorMetadata):
    """Empty: the observer sends nothing to the workers."""


_EMPTY_META = ShadowConnectorMetadata()


class _HookCounters:
    """Counters written only by the scheduler thread (read elsewhere without a lock)."""

    __slots__ = ("observed", "dropped", "errors", "engine_query", "engine_hit")

    def __init__(self) -> None:
        self.observed = self.dropped = self.errors = 0
        self.engine_query = self.engine_hit = 0

    def row(self) -> tuple[int, ...]:
        """The values in ``schema.HOOK_FIELDS`` order."""
        return (self.observed, self.dropped, self.errors, self.engine_query, self.engine_hit)


class ShadowConnector(KVConnectorBase_V1, SupportsHMA):
    """Observer connector running shadow prefix caches in lockstep with the engine."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self._shadow_on = False
        self._worker: ShadowWorker | None = None
        self._endpoint = None
        self._exit_hook: multiprocessing.util.Finalize | None = None
        if role != KVConnectorRole.SCHEDULER:
            return  # NOTE: the worker side has nothing to do; only the scheduler sees requests
        ver = _version_tuple(getattr(vllm, "__version__", "0.0"))
        if not (SUPPORTED_VLLM[0] <= ver < SUPPORTED_VLLM[1]):
            logger.warning("shadow connector: vLLM %s is outside the tested range >= 0.27, < 0.34",
                           vllm.__version__)
        self.cfg = self._parse_config(vllm_config, kv_cache_config)
        self.block_size = self.cfg.block_size
        self.counters = _HookCounters()
        self._local_hit: dict[str, int] = {}
        # request id -> (request, number of block hashes admitted)
        self._inflight: dict[str, tuple[Any, int]] = {}
        # this step's admissions (Admit events), queued with the step
        self._step_adm: list[Admit] = []
        self._dropped_ids: set[str] = set()
        self._logged: set[str] = set()
        self._last_us = 0       # the last event stamp (_stamp_s)
        self._stats_lock = threading.Lock()
        if not self.cfg.enabled:
            logger.info("shadow connector: disabled by configuration (observer only)")
            return
        recorder = None
        if self.cfg.record_dir:
            from shadow.connector.recorder import Recorder

            recorder = Recorder(self.cfg.record_dir, block_size=self.block_size,
                                engine_id=self.cfg.engine_id, dp_rank=self.cfg.dp_rank,
                                max_bytes=self.cfg.segment_max_bytes,
                                max_seconds=self.cfg.segment_max_seconds,
                                flush_ms=self.cfg.record_flush_ms,
                                session_window=self.cfg.record_session_window,
                                replica=self.cfg.replica,
                                keep_bytes=self.cfg.record_max_bytes,
                                keep_seconds=self.cfg.record_max_age,
                                producer=(f"shadow connector; vllm {vllm.__version__}; "
                                          f"block_size {self.block_size}; "
                                          f"hash {self._hash_algo(vllm_config)}"))
            if not self.cfg.fleet_key_set:
                logger.info("shadow connector: no fleet_key configured: this recording's block "
                            "keys are private to this process (they merge with no other "
                            "replica's recording)")
        self._worker = ShadowWorker(self.cfg, recorder=recorder, extra_keys=_extra_keys)
        self._delta = PayloadDelta(self.cfg.engine_blocks)
        # NOTE: vLLM closes the connector through Scheduler.shutdown (engine core exit, `LLM`
        # deleted, SIGTERM with a shutdown timeout); this hook closes the recording where that
        # path is not reached: the connector collected without a shutdown, or the engine-core
        # process ending otherwise (multiprocessing runs it at a child's exit, atexit in a
        # main process)
        self._exit_hook = multiprocessing.util.Finalize(
            self, _close_worker, args=(self._worker,), exitpriority=EXIT_PRIORITY)
        self._shadow_on = True
        self.model_name = self._model_name(vllm_config)
        if self.cfg.metrics_port is not None:
            port = self.cfg.metrics_port + self.cfg.dp_rank if self.cfg.metrics_port else 0
            try:
                self._endpoint = start_endpoint(self.cfg.metrics_host, port, ShadowCollector(
                    self.cumulative_payload, self.model_name, str(self.cfg.dp_rank),
                    self.cfg.replica))
            except OSError as exc:
                raise ShadowError(f"kv_connector_extra_config.metrics_port: cannot listen on "
                                  f"{self.cfg.metrics_host}:{port}: {exc.strerror}") from None
        INSTANCES.add(self)
        logger.info("shadow connector: %d shadow caches (%s x capacities %s blocks of %d tokens), "
                    "engine capacity %d blocks, cost model %s, recording %s, metrics endpoint %s",
                    len(self.cfg.caches), ",".join(p.label for p in self.cfg.policies),
                    ",".join(map(str, self.cfg.capacities)), self.block_size,
                    self.cfg.engine_blocks, self.cfg.cost_model, self.cfg.record_dir or "off",
                    self.metrics_address or "off")
        if self.cfg.tiers:
            logger.info("shadow connector: offload tiers %s behind %d cache(s) (%s), %s bytes per "
                        "block", ",".join(t.label for t in self.cfg.tiers),
                        len(self.cfg.tier_targets), self.cfg.tier_caches,
                        self.cfg.bytes_per_block or "unknown")

    # -- configuration ------------------------------------------------------------------------
    @staticmethod
    def _parse_config(vllm_config: "VllmConfig", kv_cache_config: Any) -> ShadowConfig:
        if kv_cache_config is None:
            raise ShadowError("shadow connector: vLLM passed no kv_cache_config (vLLM < 0.27 is "
                              "not supported)")
        block_size = getattr(kv_cache_config, "hash_block_size", None)
        if not block_size:
            block_size = vllm_config.cache_config.block_size
        # NOTE: vLLM's block pool keeps one null block out of num_blocks.
        engine_blocks = int(kv_cache_config.num_blocks) - 1
        ktc = vllm_config.kv_transfer_config
        extra = getattr(ktc, "kv_connector_extra_config", None) or {}
        pc = vllm_config.parallel_config
        dp_rank = int(getattr(pc, "data_parallel_rank", 0) or 0)
        dp_size = int(getattr(pc, "data_parallel_size", 1) or 1)
        # NOTE: KVTransferConfig.engine_id defaults to a fresh uuid4 per start, which would make
        # segment names unstable; the recording's engine name comes from extra_config.engine_id.
        return parse_extra_config(extra, block_size=int(block_size), engine_blocks=engine_blocks,
                                  engine_id="0", dp_rank=dp_rank, dp_size=dp_size,
                                  bytes_per_block=kv_bytes_per_block(kv_cache_config),
                                  model_config_json=ShadowConnector._model_config_json(vllm_config))

    @staticmethod
    def _model_config_json(vllm_config: "VllmConfig") -> str | None:
        """The served model's ``config.json`` when it is a local file (a model directory, or a
        Hub model already in the local Hugging Face cache), else None."""
        mc = vllm_config.model_config
        model = str(getattr(mc, "model", "") or "")
        path = os.path.join(model, "config.json")
        if model and os.path.isfile(path):
            return path
        try:
            from huggingface_hub import try_to_load_from_cache
            hit = try_to_load_from_cache(model, "config.json",
                                         revision=getattr(mc, "revision", None))
        except Exception:    # NOTE: no hub package, a name that is no repo id: no costs, no error
            return None
        return hit if isinstance(hit, str) and os.path.isfile(hit) else None

    @staticmethod
    def _model_name(vllm_config: "VllmConfig") -> str:
        mc = vllm_config.model_config
        name = getattr(mc, "served_model_name", None) or getattr(mc, "model", "")
        if isinstance(name, (list, tuple)):
            name = name[0] if name else ""
        return str(name)

    @staticmethod
    def _hash_algo(vllm_config: "VllmConfig") -> str:
        return str(getattr(vllm_config.cache_config, "prefix_caching_hash_algo", "?"))

    @property
    def metrics_address(self) -> str | None:
        if self._endpoint is None:
            return None
        host, port = self._endpoint.server_address[:2]
        return f"{host}:{port}"

    # -- error handling -----------------------------------------------------------------------
    def _stamp_s(self) -> float:
        """Now, in whole microseconds (as seconds), strictly later than every earlier stamp.

        NOTE: admissions and releases are stamped on the scheduler's thread in the order the
        engine makes them, and the recording keeps these stamps (``start_time_us`` is the
        admission, ``complete_time_us`` the release): ``shadow simulate --timing recorded``
        orders events by them, so two events must never share a microsecond.
        """
        us = max(int(time.time() * 1e6), self._last_us + 1)
        self._last_us = us
        return us / 1e6

    def _error(self, where: str, exc: BaseException) -> None:
        self.counters.errors += 1
        if where not in self._logged:
            self._logged.add(where)
            logger.error("shadow connector: %s failed; the engine keeps serving (counted in "
                         "shadow_errors_total, logged once): %r", where, exc, exc_info=exc)

    # -- scheduler-side hooks -----------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        if self._shadow_on:
            try:
                self._local_hit[request.request_id] = num_computed_tokens
            except Exception as exc:  # noqa: BLE001
                self._error("get_num_new_matched_tokens", exc)
        return 0, False

    def update_state_after_alloc(self, request: "Request", blocks: Any,
                                 num_external_tokens: int) -> None:
        if not self._shadow_on:
            return
        try:
            rid = request.request_id
            local_hit = self._local_hit.pop(rid, 0)
            if rid in self._inflight:
                return  # NOTE: a second allocation callback for an admitted request
            hashes = request.block_hashes[:]
            num_tokens = request.num_tokens
            preempted = request.num_preemptions > 0
            c = self.counters
            if not preempted:
                c.observed += 1
                # NOTE: like vLLM's own prefix-cache stats, preempted re-admissions are excluded
                c.engine_query += num_tokens
                c.engine_hit += local_hit
            if rid in self._dropped_ids:
                return
            # NOTE: queued with the step (build_connector_meta), which knows the tokens
            # scheduled and, for a step with preemptions, what vLLM did before admitting
            # NOTE: `end` holds the local hit until the step adds the tokens it scheduled
            self._step_adm.append(Admit(rid, hashes, num_tokens, local_hit, preempted,
                                        self._stamp_s(), request.block_hashes, local_hit,
                                        request, request.arrival_time))
            self._inflight[rid] = (request, len(hashes))
        except Exception as exc:  # noqa: BLE001
            self._error("update_state_after_alloc", exc)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        if self._shadow_on:
            try:
                self._queue_step(scheduler_output)
            except Exception as exc:  # noqa: BLE001
                self._error("build_connector_meta", exc)
        return _EMPTY_META

    def _queue_step(self, so: "SchedulerOutput") -> None:
        """Queue what this step did to the KV cache (one event; O(preemptions + admissions)).

        NOTE: the running requests travel as references to the scheduler output's own lists
        (fresh each step, never changed after it is built); the worker reads them.
        """
        # NOTE: the step takes the list and the next step's admissions go into a new one: the
        # worker reads this one later, so it must never change again
        adm, self._step_adm = self._step_adm, []
        sched = so.num_scheduled_tokens
        cached = so.scheduled_cached_reqs
        pre = []
        preempted = getattr(so, "preempted_req_ids", None)
        if preempted:
            for rid in preempted:
                st = self._inflight.pop(rid, None)
                if st is None:
                    continue
                req, n_adm = st
                # NOTE: it computed all its tokens but the last sampled one, and held the partial
                # block of those as a finished request does (engine.rules.partial_tail_blocks)
                n_full = max_hit_blocks(req.num_tokens, self.block_size)
                pre.append(Preempt(rid, req.block_hashes[n_adm:n_full],
                                   partial_tail_blocks(req.num_tokens - 1, max(n_full, n_adm),
                                                       self.block_size),
                                   self._stamp_s(), req.num_tokens))
        if not (adm or pre or cached.req_ids):
            return
        if adm:
            worker = self._worker
            if len(worker.queue) >= worker.maxsize:
                # NOTE: a full queue drops the step's admissions (and later their releases);
                # growth and preemptions of admitted requests still go (or pins would leak)
                c = self.counters
                for a in adm:
                    c.dropped += 1
                    self._dropped_ids.add(a.req_id)
                    self._inflight.pop(a.req_id, None)
                adm = []
            else:
                # the tokens scheduled this step end where the admission's allocation ends
                adm = [a._replace(end=a.end + sched.get(a.req_id, 0)) for a in adm]
        ev = Step(cached.req_ids, cached.num_computed_tokens, cached.resumed_req_ids, sched,
                  pre, adm)
        if adm or pre:
            self._worker.submit_control(ev)
        else:
            self._worker.submit_quiet(ev)

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._finished(request)
        return False, None

    def request_finished_all_groups(self, request: "Request", block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, dict[str, Any] | None]:
        self._finished(request)
        return False, None

    def _finished(self, request: "Request") -> None:
        if not self._shadow_on:
            return
        try:
            rid = request.request_id
            self._local_hit.pop(rid, None)
            st = self._inflight.pop(rid, None)
            if st is None:
                self._dropped_ids.discard(rid)
                return
            n_adm = st[1]
            # NOTE: vLLM caches a block once its tokens are computed; the last sampled token never
            # is, so the generated blocks are the hashed ones up to num_computed_tokens.
            n_comp = request.num_computed_tokens
            n_full = min(len(request.block_hashes), full_blocks(n_comp, self.block_size))
            decode = request.block_hashes[n_adm:n_full] if n_full > n_adm else []
            # NOTE: a release must follow its admission even when the queue is full, or the
            # shadow would keep the request's blocks pinned forever.
            self._worker.submit_control(Release(rid, decode, request.num_output_tokens,
                                                self._stamp_s(), request.num_prompt_tokens,
                                                partial_tail_blocks(n_comp, max(n_full, n_adm),
                                                                    self.block_size), n_comp))
        except Exception as exc:  # noqa: BLE001
            self._error("request_finished", exc)

    def reset_cache(self) -> bool | None:
        if not self._shadow_on:
            return None
        try:
            self._inflight.clear()
            self._step_adm = []
            self._worker.submit_control(Reset())
            return True
        except Exception as exc:  # noqa: BLE001
            self._error("reset_cache", exc)
            return None

    @property
    def requires_kv_delivery(self) -> bool:
        return False

    # -- stats --------------------------------------------------------------------------------
    def cumulative_payload(self) -> dict[str, Any]:
        """Cumulative counters of this engine (the own endpoint's values)."""
        if self._worker is None:
            return empty_payload()
        return cumulative_payload(self._worker.snapshot, self.counters.row(),
                                  self.cfg.engine_blocks)

    def get_kv_connector_stats(self) -> ShadowStats | None:
        if not self._shadow_on:
            return None
        try:
            # NOTE: called every engine step, on the engine's thread; the worker publishes a new
            # snapshot object only after a batch, so most steps find nothing new and return early
            data = self._delta.next(self._worker.snapshot, self.counters.row())
            return None if data is None else ShadowStats(data=data)
        except Exception as exc:  # noqa: BLE001
            self._error("get_kv_connector_stats", exc)
            return None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> ShadowStats | None:
        return ShadowStats(data=data) if data is not None else ShadowStats()

    @classmethod
    def build_prom_metrics(cls, vllm_config: "VllmConfig", metric_types: dict,
                           labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]) -> ShadowPromMetrics:
        seal_orphans_of(vllm_config)
        return ShadowPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # -- test / operator helpers --------------------------------------------------------------
    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until the worker has processed everything queued so far (tests, shutdown)."""
        return self._worker.flush(timeout_s) if self._worker is not None else True

    def predictions(self) -> list[Prediction]:
        """The bounded in-memory log of per-request shadow predictions (oldest first)."""
        return list(self._worker.predictions) if self._worker is not None else []

    def prediction(self, request_id: str) -> Prediction | None:
        """The prediction made when ``request_id`` was first admitted, or None if not logged.

        ``request_id`` is vLLM's internal id or the caller's own (vLLM 0.32 appends ``-`` and 8
        characters to it).  A preempted request is admitted again and logged again (with
        ``preempted`` True); the first admission is the one vLLM reports as
        ``RequestOutput.num_cached_tokens``, so that is the entry returned.
        """
        for p in self.predictions():
            if not p.preempted and (p.request_id == request_id
                                    or p.request_id.rsplit("-", 1)[0] == request_id):
                return p
        return None

    def pool(self, key: str):
        """The live :class:`shadow.sim.engine.pool.VllmBlockPool` of ``vllm`` cache ``key``
        (``"vllm|<capacity>"``), for reading its state in process after :meth:`flush`."""
        if self._worker is None:
            raise KeyError(key)
        from shadow.sim.engine.pool import VllmBlockPool

        run = self._worker.cache_state(key)
        if not isinstance(run, VllmBlockPool):
            raise KeyError(f"{key} is not a vllm cache")
        return run

    @property
    def cache_keys(self) -> tuple[str, ...]:
        return self._worker.keys if self._worker is not None else ()

    @property
    def recorder(self):
        return self._worker.recorder if self._worker is not None else None

    def shutdown(self) -> None:
        """Scheduler.shutdown's call: drain the worker, finish the open segment under its final
        name, release the stream, stop the endpoint (idempotent)."""
        if self._exit_hook is not None:
            self._exit_hook.cancel()
            self._exit_hook = None
        if self._worker is not None:
            try:
                self._worker.stop()
            except Exception as exc:  # noqa: BLE001
                self._error("shutdown", exc)
        if self._endpoint is not None:
            try:
                self._endpoint.shutdown()
                self._endpoint.server_close()
            except Exception as exc:  # noqa: BLE001
                self._error("shutdown", exc)
            self._endpoint = None
        self._shadow_on = False

    # -- worker side: a pure observer does nothing --------------------------------------------
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        return None

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return None

    def wait_for_save(self) -> None:
        return None


__all__ = ["ShadowConnector", "ShadowConnectorMetadata", "INSTANCES"]
