"""Any OpenAI-compatible server as an engine: the recipe's ``command`` launches it (``{port}`` and
``{host}`` are filled in), ``GET /health`` answering 200 means ready, ``usage`` gives token counts.

No step timings beyond ``usage``, and no forced decode (it is not a
:class:`~frankenstein.engines.contract.ForcedDecoder`): fidelity designs refuse it by name.
"""

from __future__ import annotations

from frankenstein.engines.base import ProcessEngine


class OpenAIEngine(ProcessEngine):
    kind = "openai"
    ready_path = "/health"
    endpoints = ("/v1/chat/completions", "/v1/completions")

    def command(self, port: int) -> list[str]:
        return self.user_command(port)
