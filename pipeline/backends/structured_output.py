"""JSON-schema constrained output for the LMs that ask for it (`lm.<role>.structured_output: json_schema`).

`declare_structured_output(engine)` marks an LM's engine as DSPy reads a custom engine's capabilities.
`StructuredOutputAdapter` (a `dspy.ChatAdapter` entry points install) runs every call of such an LM
through DSPy's `JSONAdapter` (the output fields as `response_format`, the JSON reply parsed); every
other LM is served exactly as by `ChatAdapter`. It does not build LMs or choose the knob.
"""

from __future__ import annotations

from typing import Any

import dspy
from dspy.adapters.json_adapter import JSONAdapter

__all__ = ["StructuredOutputAdapter", "asks_for_json_schema", "declare_structured_output"]

# what a structured engine declares it accepts (DSPy's JSONAdapter looks for response_format here)
STRUCTURED_PARAMS = frozenset({"temperature", "max_tokens", "top_p", "stop", "response_format"})


def declare_structured_output(engine: Any) -> None:
    """Mark `engine` (a DSPy custom engine) as honouring JSON-schema `response_format`."""
    engine.supports_response_schema = True
    engine.supported_params = STRUCTURED_PARAMS


def asks_for_json_schema(lm: Any) -> bool:
    """Whether `lm`'s engine declares JSON-schema support (only `declare_structured_output` does here)."""
    return getattr(getattr(lm, "engine", None), "supports_response_schema", False) is True


class StructuredOutputAdapter(dspy.ChatAdapter):
    """DSPy's ChatAdapter, except that an LM asking for JSON-schema output is run by its JSONAdapter."""

    def _json_adapter(self) -> JSONAdapter:
        return JSONAdapter(use_native_function_calling=self.use_native_function_calling,
                           parallel_tool_calls=self.parallel_tool_calls)

    def __call__(
        self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: list[dict[str, Any]], inputs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        if asks_for_json_schema(lm):
            return self._json_adapter()(lm, lm_kwargs, signature, demos, inputs)
        return super().__call__(lm, lm_kwargs, signature, demos, inputs)

    async def acall(
        self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: list[dict[str, Any]], inputs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        if asks_for_json_schema(lm):
            return await self._json_adapter().acall(lm, lm_kwargs, signature, demos, inputs)
        return await super().acall(lm, lm_kwargs, signature, demos, inputs)
