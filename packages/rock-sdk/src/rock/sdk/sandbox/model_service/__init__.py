"""ROCK's ``rock.sdk.sandbox.model_service``: :class:`ModelServiceConfig`, :class:`ModelService`
(with :meth:`ModelService.anti_call_llm`), and rock's :class:`ModelCallHub` (one wait for many
sandboxes' model calls) and :class:`ModelCall`."""

from rock.sdk.sandbox.model_service.base import (
    ModelCall,
    ModelService,
    ModelServiceConfig,
    ModelServiceError,
)
from rock.sdk.sandbox.model_service.hub import ModelCallHub

__all__ = [
    "ModelCall",
    "ModelCallHub",
    "ModelService",
    "ModelServiceConfig",
    "ModelServiceError",
    "anti_call_llm",
]


async def anti_call_llm(
    model_service: ModelService,
    index: int,
    response_payload: str | None = None,
    call_timeout: int = 600,
    check_interval: int = 3,
) -> str:
    """:meth:`ModelService.anti_call_llm` as a function."""
    return await model_service.anti_call_llm(index, response_payload, call_timeout, check_interval)
