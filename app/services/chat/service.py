"""Chat completions: what is chat-specific on the generation skeleton.

The engine request (messages for the template, tools, reasoning controls, images);
the `chat.completion` / `chat.completion.chunk` wire shapes are
`app.services.chat.wire`'s; running the engine, counting usage and streaming are
`app.services.generation.service`'s.
"""

from __future__ import annotations

from app.errors import InvalidRequest, ServiceUnavailable
from app.schemas.chat import ChatCompletionRequest, Message
from app.schemas.json import JsonObject
from app.services.chat.wire import ChatGeneration
from app.services.generation import prompt_logprobs
from app.services.generation.sampling import check_common, sampling_options
from app.services.generation.service import GenerationService
from app.services.generation.tools import template_tool_calls, tool_fields
from app.services.images.decoding import image_refs
from app.services.images.service import ImageLoader, template_content
from engine.admission.runtime import AdmissionController
from engine.offload import off_loop
from engine.protocol import GenerateRequest
from engine.warm.pool import ModelPool


def messages_for_template(messages: list[Message]) -> list[JsonObject]:
    """Wire messages -> the plain dicts chat templates expect (`developer` reads as `system`)."""
    rendered: list[JsonObject] = []
    for message in messages:
        role = message.__struct_config__.tag  # the `role` tag msgspec decoded it by
        if role == "developer":
            role = "system"
        item: JsonObject = {"role": role, "content": template_content(message.content)}
        tool_call_id = getattr(message, "tool_call_id", None)
        if tool_call_id is not None:
            item["tool_call_id"] = tool_call_id
        tool_calls = getattr(message, "tool_calls", None)
        if tool_calls:
            item["tool_calls"] = template_tool_calls(tool_calls)
        reasoning = getattr(message, "reasoning", None)
        if reasoning is not None:
            # Published templates read `reasoning_content`; ours and vLLM's read `reasoning`.
            item["reasoning"] = item["reasoning_content"] = reasoning
        rendered.append(item)
    return rendered


def reasoning_controls(request: ChatCompletionRequest) -> JsonObject:
    """The top-level reasoning fields the client set; the engine's family reads them."""
    fields = {
        "thinking": request.thinking,
        "enable_thinking": request.enable_thinking,
        "reasoning_effort": request.reasoning_effort,
    }
    return {key: value for key, value in fields.items() if value is not None}


def engine_request(
    request: ChatCompletionRequest, request_id: str, client: str | None = None
) -> GenerateRequest:
    """The checked engine request of a chat request whose model is known to be served."""
    max_tokens = request.max_completion_tokens or request.max_tokens
    check_common(request, max_tokens)
    if request.top_logprobs is not None and not request.logprobs:
        raise InvalidRequest("`top_logprobs` requires `logprobs: true`.", param="top_logprobs")
    logprobs = (request.top_logprobs or 0) if request.logprobs else None
    if request.continue_final_message and request.add_generation_prompt:
        raise InvalidRequest(
            "`continue_final_message` needs `add_generation_prompt: false`.",
            param="continue_final_message",
        )
    return GenerateRequest(
        request_id=request_id,
        sampling=sampling_options(
            request,
            max_tokens=max_tokens,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs.requested(request),
        ),
        messages=messages_for_template(request.messages),
        template_kwargs=dict(request.chat_template_kwargs or {}),
        reasoning_controls=reasoning_controls(request),
        **tool_fields(request),
        client=client,
        priority=request.priority,
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        documents=request.documents,
    )


def generate_has_images(request: ChatCompletionRequest) -> bool:
    return bool(image_refs(request.messages))


# A request this small is checked on the event loop: the checks take a few microseconds,
# a hop to the request-work pool and back about 70 µs of CPU (and its latency).
INLINE_MESSAGES = 16
INLINE_CHARS = 8192


def checks_inline(request: ChatCompletionRequest) -> bool:
    """Whether `request` carries nothing whose checks grow with it beyond a few short
    text messages: no tools, schemas, grammars, images, template extras, token lists or
    stop lists."""
    if (
        request.tools
        or request.response_format is not None
        or request.structured_outputs is not None
        or request.guided_json is not None
        or request.guided_regex is not None
        or request.guided_grammar is not None
        or request.guided_choice is not None
        or request.chat_template_kwargs
        or request.documents is not None
        or request.logit_bias
        or request.stop_token_ids
        or request.allowed_token_ids
        or request.bad_words
        or not isinstance(request.stop, str | None)
        or len(request.stop or "") > INLINE_CHARS
        or len(request.messages) > INLINE_MESSAGES
    ):
        return False
    chars = 0
    for message in request.messages:
        if not isinstance(message.content, str):
            return False  # parts (images, several texts) or tool calls: the pool
        chars += len(message.content)
    return chars <= INLINE_CHARS


class ChatService(GenerationService[ChatCompletionRequest]):
    id_prefix = "chatcmpl"

    def __init__(
        self, models: ModelPool, admission: AdmissionController, images: ImageLoader | None = None
    ) -> None:
        super().__init__(models, admission)
        self._images = images or ImageLoader()

    async def engine_requests(
        self, request: ChatCompletionRequest, request_id: str, client: str | None
    ) -> list[GenerateRequest]:
        """Checks first (off the event loop: schema checks take time in proportion to the
        schemas); images are fetched and decoded only for an otherwise valid request, and
        only while admission admits (a draining server fetches nothing)."""
        if checks_inline(request):
            generate = engine_request(request, request_id, client)
        else:
            generate = await off_loop(engine_request, request, request_id, client)
        if generate_has_images(request) and not self._admission.admitting():
            raise ServiceUnavailable(
                "The server is not admitting requests now; images are not fetched.",
                self._admission.retry_after_s(),
                code="draining",
            )
        generate.images = await self._images.load(
            request.messages, self.engine_for(request), client
        )
        return [generate]

    def generation(self, request: ChatCompletionRequest, request_id: str) -> ChatGeneration:
        return ChatGeneration(request, request_id)
