"""replay: drive a real vLLM server with a trace's exact prefix structure and validate the shadow.

Modules (one concept each):

* :mod:`replay.tokens`        keyed token synthesis (block id -> the same token ids everywhere)
* :mod:`replay.workload`      trace -> requests (scaling, tail tokens, output lengths, arrival times)
* :mod:`replay.timing`        send schedules: trace times, rate (Poisson/gamma), closed loop
* :mod:`replay.client`        the asyncio streaming client (TTFT, ITL, E2E, cached tokens, errors)
* :mod:`replay.server`        ``--launch`` and what the server runs (/v1/models, /metrics)
* :mod:`replay.results`       per-request records, run metadata, summary
* :mod:`replay.engine_model`  a request in engine blocks; a plain model of vLLM's block pool
* :mod:`replay.predict`       the simulator's prediction of every request's cached tokens
* :mod:`replay.prefill`       the fitted prefill (TTFT) model
* :mod:`replay.report`        the validation report and plots
* :mod:`replay.cli`           the ``replay`` command

See docs/replay.md.
"""

__all__: list[str] = []
