"""The model service's server: an OpenAI-compatible ``/v1/chat/completions`` on asyncio streams
(standard library only), in ``local`` mode (:mod:`.local`) or ``proxy`` mode (:mod:`.proxy`)."""
