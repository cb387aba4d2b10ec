"""Chat completions: what is chat-specific on the generation skeleton.

The engine request (messages for the template, tools, reasoning controls, images) and
the `chat.completion` / `chat.completion.chunk` wire shapes; running the engine,
counting usage and streaming are `app.services.generation`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from msgspec import UNSET

from app.errors import InvalidRequest, ServiceUnavailable
from app.schemas.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    Message,
    ResponseMessage,
    TextPart,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from app.schemas.extensions import PromptLogprobs
from app.services import prompt_logprobs
from app.services.chat_frames import ContentFrames
from app.services.generation import ChoiceState, Generation, GenerationService, include_usage
from app.services.image_decoding import image_refs
from app.services.images import ImageLoader, template_content
from app.services.sampling import check_common, sampling_options
from app.services.tools import (
    ToolCallCollector,
    template_tool_calls,
    tool_fields,
    wire_deltas,
)
from engine import protocol
from engine.admission.runtime import AdmissionController
from engine.offload import off_loop
from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest
from engine.warm.pool import ModelPool


def messages_for_template(messages: list[Message]) -> list[dict[str, Any]]:
    """Wire messages -> the plain dicts chat templates expect (`developer` reads as `system`)."""
    rendered = []
    for message in messages:
        role = message.__struct_config__.tag  # the `role` tag msgspec decoded it by
        if role == "developer":
            role = "system"
        item: dict[str, Any] = {"role": role, "content": template_content(message.content)}
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


def to_wire_logprobs(entries: list[protocol.TokenLogprob] | None) -> ChoiceLogprobs | None:
    if entries is None:
        return None
    return ChoiceLogprobs(
        content=[
            TokenLogprob(
                token=entry.token,
                logprob=entry.logprob,
                bytes=list(entry.token.encode()),
                top_logprobs=[
                    TopLogprob(token=top.token, logprob=top.logprob, bytes=list(top.token.encode()))
                    for top in entry.top
                ],
            )
            for entry in entries
        ]
    )


def reasoning_controls(request: ChatCompletionRequest) -> dict[str, Any]:
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


def echoed_text(request: ChatCompletionRequest) -> str:
    """With `echo`: the last message's text when it has the answer's role (`assistant`,
    or the last message's own role without a generation prompt), as `vllm serve` echoes."""
    if not request.echo:
        return ""
    last = request.messages[-1]
    role = last.__struct_config__.tag
    if request.add_generation_prompt and role != "assistant":
        return ""
    content = last.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


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


@dataclass(slots=True)
class ChatChoiceState(ChoiceState):
    reasoning: list[str] = field(default_factory=list)
    logprobs: list[protocol.TokenLogprob] = field(default_factory=list)
    calls: ToolCallCollector = field(default_factory=ToolCallCollector)

    def message(self) -> ResponseMessage:
        text = "".join(self.text)
        tool_calls = self.calls.calls()
        message = ResponseMessage(content=text or None if tool_calls else text)
        if tool_calls:
            message.tool_calls = tool_calls
        if self.reasoning:
            message.reasoning = "".join(self.reasoning)
        return message


class ChatGeneration(Generation[ChatChoiceState]):
    """The `chat.completion` and `chat.completion.chunk` shapes of one request."""

    def __init__(self, request: ChatCompletionRequest, request_id: str) -> None:
        super().__init__(request_id, request.model, include_usage(request))
        self._n = request.n
        self._wants_logprobs = bool(request.logprobs)
        self._started: set[int] = set()
        self._echo = echoed_text(request)
        self._prompt_logprobs_k = request.prompt_logprobs
        self._prompt_logprobs: PromptLogprobs | None = None
        self._content_frames: ContentFrames | None = None

    def choice_states(self) -> dict[int, ChatChoiceState]:
        states = {i: ChatChoiceState(i) for i in range(self._n)}
        if self._echo:
            for state in states.values():
                state.text.append(self._echo)
        return states

    def absorb_output(
        self, states: dict[int, ChatChoiceState], position: int, out: GenerateOutput
    ) -> None:
        if self._prompt_logprobs_k is not None and out.prompt_logprobs is not None:
            self._prompt_logprobs = prompt_logprobs.wire_prompt_logprobs(
                out.prompt_logprobs, self._prompt_logprobs_k
            )

    def state_of(
        self, states: dict[int, ChatChoiceState], position: int, delta: ChoiceDelta
    ) -> ChatChoiceState:
        return states[delta.index]

    def absorb(self, state: ChatChoiceState, delta: ChoiceDelta) -> None:
        if delta.logprobs:
            state.logprobs.extend(delta.logprobs)
        if delta.tool_calls:
            state.calls.add(delta.tool_calls)
        if delta.reasoning:
            state.reasoning.append(delta.reasoning)

    def body(self, states: dict[int, ChatChoiceState], usage: Usage) -> ChatCompletion:
        choices = [
            Choice(
                index=state.index,
                message=state.message(),
                logprobs=to_wire_logprobs(state.logprobs) if self._wants_logprobs else None,
                finish_reason=state.finish_reason,
            )
            for state in states.values()
        ]
        return ChatCompletion(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
            prompt_logprobs=UNSET if self._prompt_logprobs_k is None else self._prompt_logprobs,
        )

    def delta_frame(
        self, position: int, output: GenerateOutput, delta: ChoiceDelta
    ) -> bytes | None:
        # Most chunks of a stream are the same bytes around one piece of content: those
        # are written from a template (ContentFrames), byte for byte what encoding the
        # chunk would give; every other chunk is built and encoded.
        if (
            delta.text
            and delta.index in self._started
            and delta.finish_reason is None
            and delta.logprobs is None
            and not (delta.reasoning or delta.tool_calls)
        ):
            if self._content_frames is None:
                self._content_frames = ContentFrames(
                    self.id, self.created, self.model, self.chunk_usage
                )
            data = self._content_frames.frame(delta.index, delta.text)
            if data is not None:
                return data
        return super().delta_frame(position, output, delta)

    def delta_chunk(
        self, position: int, output: GenerateOutput, delta: ChoiceDelta
    ) -> ChatCompletionChunk | None:
        role: Literal["assistant"] | None = None
        text = delta.text
        if delta.index not in self._started:
            self._started.add(delta.index)
            role = "assistant"
            text = self._echo + text
        if not (text or delta.reasoning or role or delta.finish_reason or delta.tool_calls):
            return None
        tool_calls = wire_deltas(delta.tool_calls) if delta.tool_calls else None
        # The first chunk carries content "" with the role, unless it carries
        # reasoning or a tool call instead.
        first_content = role is not None and not (delta.reasoning or tool_calls)
        choice = ChunkChoice(
            index=delta.index,
            delta=Delta(
                role=role,
                content=text if text or first_content else None,
                reasoning=delta.reasoning or None,
                tool_calls=tool_calls,
            ),
            logprobs=to_wire_logprobs(delta.logprobs),
            finish_reason=delta.finish_reason,
        )
        return ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[choice],
            usage=self.chunk_usage,
        )

    def usage_chunk(self, usage: Usage) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model, choices=[], usage=usage
        )
