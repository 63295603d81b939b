"""The service's HTTP routes: OpenAI's Files and Batches API, errors in OpenAI's shape, and ``GET /metrics``."""

from __future__ import annotations

import hmac

from fastapi import Depends, FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from pipeline.service import metrics
from pipeline.service.errors import ApiError, invalid
from pipeline.service.objects import PURPOSES, new_file_id, page, shown
from pipeline.service.runner import Runner
from pipeline.service.store import Store

V1 = "/v1"


class BatchRequest(BaseModel):
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict | None = None


def create_app(runner: Runner, store: Store, api_key: str | None) -> FastAPI:
    async def authorized(request: Request) -> None:  # async, so that a request does not hop to a thread
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), api_key.encode()):
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")

    # No OpenAPI schema or docs pages are served, so the app needs no title either.
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, dependencies=[Depends(authorized)])
    _error_shapes(app)
    _file_routes(app, runner, store)
    _batch_routes(app, runner)
    batch_metrics = metrics.registry(runner.records)

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(generate_latest(batch_metrics), media_type=CONTENT_TYPE_LATEST)

    return app


def _file_routes(app: FastAPI, runner: Runner, store: Store) -> None:
    @app.post(f"{V1}/files")
    def upload(file: UploadFile = File(...), purpose: str = Form(...)) -> dict:
        if purpose not in PURPOSES:
            raise invalid(f"Invalid purpose '{purpose}'; one of {', '.join(PURPOSES)}.", param="purpose")
        return shown(store.add_file(new_file_id(), file.filename or "upload.jsonl", purpose, file.file))

    @app.get(f"{V1}/files")
    def files(purpose: str | None = None) -> dict:
        return page([shown(f) for f in store.files() if purpose is None or f["purpose"] == purpose], has_more=False)

    @app.get(f"{V1}/files/{{file_id}}")
    def file(file_id: str) -> dict:
        return shown(store.file(file_id))

    @app.get(f"{V1}/files/{{file_id}}/content")
    def content(file_id: str) -> FileResponse:
        record = store.file(file_id)
        return FileResponse(
            store.content_path(file_id), media_type="application/octet-stream", filename=record["filename"]
        )

    @app.delete(f"{V1}/files/{{file_id}}")
    def delete(file_id: str) -> dict:
        store.file(file_id)
        using = runner.running_on(file_id)
        if using:
            raise invalid(
                f"File {file_id} is the input of batch {using[0]}, which is not over; cancel it first.",
                param="file_id",
                code="file_in_use",
            )
        store.delete_file(file_id)
        return {"id": file_id, "object": "file", "deleted": True}


def _batch_routes(app: FastAPI, runner: Runner) -> None:
    @app.post(f"{V1}/batches")
    def create(body: BatchRequest) -> dict:
        return runner.create(body.input_file_id, body.endpoint, body.completion_window, body.metadata)

    @app.get(f"{V1}/batches")
    def batches(after: str | None = None, limit: int = Query(20)) -> dict:
        return runner.list_batches(after, limit)

    @app.get(f"{V1}/batches/{{batch_id}}")
    async def batch(batch_id: str) -> dict:  # async, so that a poll does not hop to a thread
        return runner.get(batch_id)

    @app.post(f"{V1}/batches/{{batch_id}}/cancel")
    def cancel(batch_id: str) -> dict:
        return runner.cancel(batch_id)


def _error_shapes(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
        param = ".".join(where) or None
        message = f"{param}: {first.get('msg', 'invalid request')}" if param else first.get("msg", "invalid request")
        return JSONResponse(invalid(message, param=param).body(), status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        message = (
            f"Unknown request URL: {request.method} {request.url.path}." if exc.status_code == 404 else str(exc.detail)
        )
        return JSONResponse(ApiError(exc.status_code, message, code=code).body(), status_code=exc.status_code)
