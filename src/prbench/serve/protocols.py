"""The wire formats the reward server speaks: request models and reply bodies, one section per dialect.

- prbench's own `POST /score`: `{"items": [{query, response, profile?, rubric_aspects?, id?}]}`.
- OpenRLHF's `POST /get_reward` (0.11.2, `openrlhf/utils/agent.py`, `_fetch_rewards_via_http`,
  lines 327-365): `{"query": [str], "prompts": [str], "labels": [str]}`.
- vLLM's pooling API, as verl's Reward Loop calls it (verl 0.9.1 pairs with vLLM 0.24.0):
  `POST /classify` and `POST /pooling`. Field lists from vLLM 0.24.0
  `vllm/entrypoints/pooling/base/protocol.py` (`PoolingBasicRequestMixin` lines 21-69,
  `CompletionRequestMixin` 155-168, `ChatRequestOptionsMixin` 171-234, `ChatRequestMixin` 255-258,
  `EmbedRequestMixin` 286-297, `ClassifyRequestMixin` 300-306), `pooling/classify/protocol.py`
  (`ClassificationCompletionRequest` / `ClassificationChatRequest` lines 25-53, `ClassificationData`
  / `ClassificationResponse` 56-69) and `pooling/pooling/protocol.py` (`PoolingResponseData` /
  `PoolingResponse` 100-112; `task` is `vllm/tasks.py`'s `PoolingTask`, lines 8-15). vLLM's `OpenAIBaseModel` (`entrypoints/openai/engine/protocol.py`
  lines 28-57) *allows* unknown fields (logs and ignores them), and so do these models; what vLLM
  refuses (a value of the wrong type or range, `input` and `messages` both missing, both
  `continue_final_message` and `add_generation_prompt`, a body that is not `application/json`)
  is refused here with vLLM's error body: HTTP 400 and `{"error": {"message", "type": "Bad Request",
  "param", "code": 400}}` (`serve/utils/server_utils.py`, `validation_exception_handler`, lines 412-450;
  `validate_json_request` in `serve/utils/api_utils.py`, lines 342-348).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, model_validator

NonBlank = Annotated[StrictStr, Field(min_length=1)]


def validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()[:20]]


# -- prbench /score -------------------------------------------------------------------------------
class AspectIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    aspect: NonBlank
    reason: StrictStr = ""


class ScoreItem(BaseModel):
    """`profile` is read as /get_reward reads a label's (`prbench.schema.posts_from_wire`): posts, stances and
    past choices alike, an unknown stance refused, so the same profile gets the same reward by either route."""

    model_config = ConfigDict(extra="ignore")
    query: NonBlank
    response: StrictStr
    profile: list[Any] | None = None
    rubric_aspects: list[AspectIn] | None = None
    id: StrictStr | StrictInt | None = None


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    items: list[ScoreItem]


# -- OpenRLHF /get_reward -------------------------------------------------------------------------
class RewardRequest(BaseModel):
    """OpenRLHF's body: `query` always; `prompts` and `labels` as long as `query` when present."""

    model_config = ConfigDict(extra="ignore")
    query: list[StrictStr]
    prompts: list[StrictStr] | None = None
    labels: list[Any] | None = None


# -- vLLM pooling (/classify, /pooling) ------------------------------------------------------------
class _VLLMModel(BaseModel):
    model_config = ConfigDict(extra="allow")  # as vLLM's OpenAIBaseModel: unknown fields are ignored


class ChatMessage(_VLLMModel):
    """One message of the chat form as vLLM 0.24.0 reads it (`CustomChatCompletionMessageParam`,
    `entrypoints/chat_utils.py` lines 323-353: `role` required; `content` a string, a list of parts, or
    absent / null, which `_parse_chat_message_content` (lines 1743-1760) reads as no text). Text parts
    (`{"type": "text", "text"}` or a bare string) are joined with newlines as vLLM joins them for a
    string-content template (`_parse_chat_message_content_parts`, lines 1567-1605). prbench scores text:
    any other part (an image, audio) or a tool call is refused, where vLLM would pass it to the model."""

    role: StrictStr
    content: StrictStr | list[StrictStr | dict[str, Any]] | None = None
    tool_calls: list[Any] | None = None

    @model_validator(mode="after")
    def _text_only(self) -> ChatMessage:
        if self.tool_calls:
            raise ValueError("prbench scores text: a message with tool_calls cannot be scored")
        for j, part in enumerate(self.content if isinstance(self.content, list) else []):
            if isinstance(part, dict) and (part.get("type") != "text" or not isinstance(part.get("text"), str)):
                raise ValueError(f"content part {j}: prbench scores text, so a part must be "
                                 f'{{"type": "text", "text": "..."}}, got type {str(part.get("type"))[:40]!r}')
        return self

    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(p if isinstance(p, str) else p["text"] for p in self.content)
        return self.content or ""


class PoolingRequest(_VLLMModel):
    """The union of vLLM 0.24.0's completion and chat pooling requests (`input` xor `messages`)."""

    model: str | None = None
    user: str | None = None
    truncate_prompt_tokens: Annotated[int, Field(ge=-1)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    request_id: str | None = None
    priority: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] = 0
    mm_processor_kwargs: dict[str, Any] | None = None
    cache_salt: str | None = None
    input: list[int] | list[list[int]] | str | list[str] | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = False
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    use_activation: bool | None = None
    # /pooling only (EmbedRequestMixin, EncodingRequestMixin, `task`)
    task: Literal["embed", "classify", "token_embed", "token_classify", "plugin", "embed&token_classify"] | None = None
    encoding_format: Literal["float", "base64", "bytes", "bytes_only"] = "float"
    embed_dtype: Literal["float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"] = "float32"
    endianness: Literal["native", "big", "little"] = "native"
    dimensions: int | None = None

    @model_validator(mode="after")
    def _one_form(self) -> PoolingRequest:
        if self.continue_final_message and self.add_generation_prompt:
            raise ValueError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        if (self.input is None) == (self.messages is None):
            raise ValueError("give exactly one of `input` (completion form) and `messages` (chat form)")
        return self


NO_PROMPT = "You must pass at least one prompt"  # vLLM 0.24.0 `renderers/base.py` lines 369-375


def vllm_error(message: str, status: int = 400, param: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """vLLM's `ErrorResponse` body (`entrypoints/openai/engine/protocol.py`, `ErrorInfo` lines 60-68), as its
    `http_exception_handler` gives any HTTP error (`serve/utils/server_utils.py` lines 394-409): `type` is the
    status's phrase, or `kind` where vLLM names the error (`create_error_response`, `serve/utils/error_response.py`
    lines 16-72: "BadRequestError" for a ValueError). 499 (a client that left, nginx's code) has no phrase
    in `http.HTTPStatus`, which raised here before."""
    from http import HTTPStatus

    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Client Closed Request" if status == 499 else "Error"
    return {"error": {"message": message, "type": kind or phrase, "param": param, "code": status}}


def json_text_error(body: bytes) -> str | None:
    """Why `body` is not JSON text a route can read (invalid JSON, or a lone UTF-16 surrogate escape such as
    `"\\ud800"`, which Python's json reads but pydantic-core and UTF-8 refuse), or None when it is.

    Only on the error path: a body pydantic-core refused is parsed again to name the problem."""
    import json

    try:
        raw = json.loads(body)
    except (ValueError, RecursionError) as err:  # also huge integers, deep nesting
        return f"body is not valid UTF-8 JSON ({str(err)[:200]})"
    stack = [raw]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as err:
                return (f"body holds a lone surrogate escape \\u{ord(value[err.start]):04x} in a string: JSON text "
                        "must be valid Unicode (RFC 8259 section 8.2; pair it with its other half or drop it)")
        elif isinstance(value, dict):
            stack.extend(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return None


def vllm_validation_error(exc: ValidationError) -> dict[str, Any]:
    """A validation failure as vLLM's handler reports it: the first error's location is `param`."""
    errors = exc.errors()
    param = ".".join(["body", *map(str, errors[0]["loc"])]) if errors and errors[0]["loc"] else None
    detail = [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]} for e in errors[:20]]
    return vllm_error(f"{detail}", 400, param)


def _usage() -> dict[str, Any]:
    # prbench RMs do not report token counts; vLLM's UsageInfo defaults (lines 111-115) are zeros
    return {"prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 0, "prompt_tokens_details": None}


def classify_reply(model: str, values: list[float]) -> dict[str, Any]:
    """vLLM's `ClassificationResponse`: one single-class row per input, the reward in `probs[0]`."""
    return {"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model,
            "data": [{"index": i, "label": None, "probs": [v], "num_classes": 1} for i, v in enumerate(values)],
            "usage": _usage()}


def pooling_reply(model: str, values: list[float]) -> dict[str, Any]:
    """vLLM's `PoolingResponse` for `task: classify`: each input's pooled output, here `[reward]`."""
    return {"id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": model,
            "data": [{"index": i, "object": "pooling", "data": [v]} for i, v in enumerate(values)],
            "usage": _usage()}


def models_reply(model: str) -> dict[str, Any]:
    """`GET /v1/models` as vLLM answers it (`ModelList` of one `ModelCard`)."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": int(time.time()),
                                        "owned_by": "prbench", "root": model, "parent": None, "max_model_len": None,
                                        "permission": []}]}
