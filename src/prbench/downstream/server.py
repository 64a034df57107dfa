'''Reward server: any pointwise RM behind HTTP, so external RL stacks (verl, OpenRLHF) can use it.

Why: the paper's PPO runs served the RM over HTTP to verl. This server builds each RM
input through `prbench.conditions` (a View per item under the server's one condition), so
a policy trained against it is rewarded on exactly what `prbench eval` measured.

Endpoints
- `POST /score` with `{"items": [{"query": str, "response": str, "profile": [{"id", "category",
  "text"}]?, "rubric_aspects": [{"aspect", "reason"?}]?, "id": str?}, ...]}` returns
  `{"scores": [float | null, ...], "invalid": int, "truncated": int, "rm": str, "condition": str}`.
  A score the RM could not produce is `null` (and counted in `invalid`), never a made-up number.
  `profile` is required under the `profile` condition, `rubric_aspects` under `oracle`, `id`
  under `planner` (aspects come from the server's planner file); extra fields are ignored, and
  a narrative is never read.
- `GET /health` returns `{"status": "ok", ...}` (no token needed: liveness only).

Safety: binds 127.0.0.1 unless told otherwise; optional bearer token whose *value* comes
from an environment variable (never argv, which other users can read in `ps`); 401 without
a token, 403 with a wrong one. Bodies over `max_body_bytes` get 413, batches over `max_batch`
get 413, invalid JSON gets 400 and a wrong shape or type 422: malformed input never causes a 500.
Scoring runs one batch at a time (a lock), because local models are not thread-safe.

verl: a custom reward function (config `custom_reward_function.path=<this file>`,
`custom_reward_function.name=compute_score`) that asks the server. Put the profile (and,
for the oracle condition, the rubric) in the dataset's `extra_info`:

    import os
    import httpx

    URL = os.environ.get("PRBENCH_REWARD_URL", "http://127.0.0.1:8000/score")
    HEADERS = ({"Authorization": f"Bearer {os.environ['PRBENCH_REWARD_TOKEN']}"}
               if os.environ.get("PRBENCH_REWARD_TOKEN") else {})

    def _item(solution_str, extra_info):
        info = extra_info or {}
        item = {"query": info["question"], "response": solution_str, "id": str(info.get("id", ""))}
        for key in ("profile", "rubric_aspects"):
            if info.get(key) is not None:
                item[key] = info[key]
        return item

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        r = httpx.post(URL, json={"items": [_item(solution_str, extra_info)]}, headers=HEADERS, timeout=120)
        r.raise_for_status()
        score = r.json()["scores"][0]
        return 0.0 if score is None else score / 10.0  # the paper scaled RM scores by 1/10

    # With verl's batch reward manager, send a whole batch in one request instead:
    def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos):
        items = [_item(s, e) for s, e in zip(solution_strs, extra_infos)]
        r = httpx.post(URL, json={"items": items}, headers=HEADERS, timeout=600)
        r.raise_for_status()
        return [0.0 if s is None else s / 10.0 for s in r.json()["scores"]]

Keep each request under `--max-batch` items (split client-side otherwise). The `0.0` for a
null score is the client's choice; count those cases (the response's `invalid`).
'''

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from prbench.cache import content_key
from prbench.conditions import CONDITIONS, build_view, read_planner_file
from prbench.errors import PrbenchError
from prbench.extras import require
from prbench.retrieval import Retriever, load_retriever
from prbench.rewards.base import PointwiseRM, RewardModel, load_rm
from prbench.schema import ProfilePost, RubricAspect, SourceItem

log = logging.getLogger(__name__)

DEFAULT_TOKEN_ENV = "PRBENCH_REWARD_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
NonBlank = Annotated[StrictStr, Field(min_length=1)]


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


@dataclass
class ServerStats:
    requests: int = 0
    items: int = 0
    invalid: int = 0
    rejected: int = 0


class _Reject(Exception):
    def __init__(self, status: int, detail: Any):
        self.status, self.detail = status, detail


def _validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()[:20]]


class RewardService:
    """Request -> Views (through conditions) -> RM scores; independent of the HTTP layer."""

    def __init__(self, rm: PointwiseRM, condition: str, *, retriever: Retriever | None = None, top_k: int = 10,
                 planner_file: str | None = None, max_context_chars: int | None = None):
        if condition not in CONDITIONS:
            raise PrbenchError(f"unknown condition {condition!r} (use {', '.join(CONDITIONS)})")
        if condition == "wrong-profile":
            raise PrbenchError("the reward server does not offer 'wrong-profile' (a benchmark control, not a reward)")
        if condition == "planner" and not planner_file:
            raise PrbenchError("condition 'planner' needs --planner-file (aspects keyed by item id)")
        self.rm, self.condition, self.top_k = rm, condition, top_k
        self.retriever = retriever or load_retriever("bm25")
        self.planner = read_planner_file(planner_file) if planner_file else None
        self.max_context_chars = max_context_chars
        self.lock = threading.Lock()
        self.stats = ServerStats()

    def _source(self, n: int, item: ScoreItem) -> SourceItem:
        if self.condition == "profile" and item.profile is None:
            raise _Reject(422, f"items[{n}]: condition 'profile' needs a 'profile' list")
        if self.condition == "oracle" and not item.rubric_aspects:
            raise _Reject(422, f"items[{n}]: condition 'oracle' needs non-empty 'rubric_aspects'")
        item_id = str(item.id) if item.id is not None else content_key("server", item.query)[:16]
        if self.condition == "planner" and (self.planner is None or item_id not in self.planner):
            raise _Reject(422, f"items[{n}]: no planner aspects for id {item_id!r}")
        return SourceItem(
            id=item_id, question=item.query, category="server",
            profile=[ProfilePost(id=str(p.id), category=p.category, text=p.text) for p in item.profile or []],
            rubric_aspects=[RubricAspect(aspect=a.aspect, reason=a.reason) for a in item.rubric_aspects or []],
        )

    def score(self, items: Sequence[ScoreItem]) -> dict[str, Any]:
        sources = [self._source(n, it) for n, it in enumerate(items)]
        views = [build_view(s, self.condition, retriever=self.retriever, top_k=self.top_k, planner=self.planner,
                            max_context_chars=self.max_context_chars) for s in sources]
        batch = [(v, it.response) for v, it in zip(views, items)]
        with self.lock:
            scores = self.rm.score(batch) if batch else []
        values = [s.value if s.valid else None for s in scores]
        invalid = sum(v is None for v in values)
        self.stats.items += len(values)
        self.stats.invalid += invalid
        return {"scores": values, "invalid": invalid, "truncated": sum(bool(s.truncated) for s in scores),
                "rm": getattr(self.rm, "name", self.rm.spec), "condition": self.condition}


def create_app(
    rm: PointwiseRM | str,
    condition: str = "none",
    *,
    token: str | None = None,
    max_batch: int = 64,
    max_body_bytes: int = 1_000_000,
    top_k: int = 10,
    retriever: str = "bm25",
    planner_file: str | None = None,
    max_context_chars: int | None = None,
    rm_options: dict[str, Any] | None = None,
) -> Any:
    """The FastAPI app. `token` is the bearer token value itself (the CLI reads it from an env var)."""
    fastapi = require("fastapi", "serve")
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    model: RewardModel = load_rm(rm, **(rm_options or {})) if isinstance(rm, str) else rm
    if not isinstance(model, PointwiseRM):
        raise PrbenchError(f"{model.spec}: the reward server needs a pointwise RM (a judge in --mode pointwise)")
    service = RewardService(model, condition, retriever=load_retriever(retriever), top_k=top_k,
                            planner_file=planner_file, max_context_chars=max_context_chars)
    app = fastapi.FastAPI(title="prbench reward server", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service

    def reject(status: int, detail: Any, headers: dict[str, str] | None = None) -> Any:
        service.stats.rejected += 1
        return JSONResponse({"detail": detail}, status_code=status, headers=headers)

    def auth_error(request: Any) -> Any | None:
        if token is None:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return reject(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(given.strip().encode(), token.encode()):
            return reject(403, "invalid token")
        return None

    async def read_body(request: Any) -> bytes | Any:
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return reject(400, "invalid Content-Length")
            if int(length) > max_body_bytes:
                return reject(413, f"body over {max_body_bytes} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > max_body_bytes:
                return reject(413, f"body over {max_body_bytes} bytes")
        return bytes(body)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "rm": getattr(model, "name", model.spec), "condition": condition,
                "max_batch": max_batch, "max_body_bytes": max_body_bytes, "auth": token is not None,
                "served_items": service.stats.items, "invalid": service.stats.invalid}

    async def score(request):  # type: ignore[no-untyped-def]  # annotated below for FastAPI
        service.stats.requests += 1
        denied = auth_error(request)
        if denied is not None:
            return denied
        body = await read_body(request)
        if not isinstance(body, bytes):
            return body
        try:
            payload = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # also huge integers, deep nesting
            return reject(400, f"body is not valid UTF-8 JSON ({exc})")
        if isinstance(payload, dict) and isinstance(payload.get("items"), list) and len(payload["items"]) > max_batch:
            return reject(413, f"batch of {len(payload['items'])} items is over the limit of {max_batch}")
        try:
            req = ScoreRequest.model_validate(payload)
        except ValidationError as exc:
            return reject(422, _validation_detail(exc))
        try:
            return await run_in_threadpool(service.score, req.items)
        except _Reject as exc:
            return reject(exc.status, exc.detail)
        except ValueError as exc:  # pydantic/schema checks of a built record: still the client's input
            return reject(422, str(exc))

    score.__annotations__ = {"request": fastapi.Request}
    app.post("/score")(score)
    return app


def token_from_env(env_name: str | None, required: bool = False) -> str | None:
    """The bearer token from the env var `env_name` (None when unset and not required)."""
    if not env_name:
        return None
    value = os.environ.get(env_name)
    if value is None or not value.strip():
        if required:
            raise PrbenchError(f"environment variable {env_name} is not set (it should hold the bearer token)")
        return None
    return value.strip()


def serve(
    rm: PointwiseRM | str,
    condition: str = "none",
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    log_level: str = "info",
    **app_options: Any,
) -> None:
    """Run the server in the foreground (blocks)."""
    uvicorn = require("uvicorn", "serve")
    if host not in LOOPBACK and token is None:
        log.warning("serving on %s without a token: anyone who can reach this port can use the RM", host)
    app = create_app(rm, condition, token=token, **app_options)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


class ThreadedServer:
    """Uvicorn in a background thread on an ephemeral port (tests, notebooks)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0):
        uvicorn = require("uvicorn", "serve")
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.host = host

    def __enter__(self) -> ThreadedServer:  # noqa: PYI034 - py3.10 has no typing.Self
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.time() > deadline:
                raise PrbenchError("reward server did not start")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
