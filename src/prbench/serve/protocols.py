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
class ProfileIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: StrictStr | StrictInt
    category: StrictStr = ""
    text: NonBlank


class AspectIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    aspect: NonBlank
    reason: StrictStr = ""


class ScoreItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: NonBlank
    response: StrictStr
    profile: list[ProfileIn] | None = None
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
    messages: list[dict[str, Any]] | None = None
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


def vllm_error(message: str, status: int = 400, param: str | None = None) -> dict[str, Any]:
    """vLLM's `ErrorResponse` body (`entrypoints/openai/engine/protocol.py`, `ErrorInfo` lines 60-68)."""
    from http import HTTPStatus

    return {"error": {"message": message, "type": HTTPStatus(status).phrase, "param": param, "code": status}}


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
