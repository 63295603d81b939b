"""OpenAI batch lines for vLLM's ``/v1/score`` and ``/v1/rerank``, answered by the ``score`` task. A line fans out to
one score row per pair, so that the pairs of many lines about one document share its prefill, and ``lines_of``
gathers them back into vLLM's response."""

from __future__ import annotations

from pipeline.data.fanned_lines import answered_line, by_line, error_line, row_tokens
from pipeline.data.openai_format import RequestLine, RerankBody, ScoreBody, ScoringBody, read_as
from pipeline.data.openai_output import (
    PromptTokensDetails,
    PromptUsage,
    RerankDocument,
    RerankResponse,
    RerankResult,
    ScoreData,
    ScoreResponse,
    Usage,
)
from pipeline.names import ENDPOINTS

SCORING = "score"  # a scoring file's endpoint; it may mix score and rerank lines


def scoring_task(config, tokenizer):
    """The task that answers a file of scoring requests."""
    from pipeline.data.errors import JobError
    from pipeline.model import head_labels
    from tasks.registry import scoring_requests_kind
    from tasks.template import TemplateError

    try:
        return scoring_requests_kind(config.task, config.prompt, tokenizer, head_labels(config))
    except TemplateError as exc:
        raise JobError(str(exc)) from None


def scoring_kind(url) -> str | None:
    """``score`` or ``rerank`` for a scoring url, else None; vLLM matches the url's end, so ``/score`` counts too."""
    if not isinstance(url, str):
        return None
    return "score" if url.endswith("/score") else "rerank" if url.endswith("/rerank") else None


def wrong_url(url: str, expected: str) -> str:
    """The error of a line whose url is not its file's ``expected`` endpoint."""
    if expected == SCORING:
        same = "a file's requests are all for the scoring endpoints, its first line's"
        served, expected = "the scoring endpoints served are /v1/score and /v1/rerank", "/v1/score or /v1/rerank"
    else:
        same = "a file's requests are all for one endpoint, its first line's"
        served = f"the endpoints served are {', '.join(ENDPOINTS)}, /v1/score and /v1/rerank"
    other = same if url in ENDPOINTS or scoring_kind(url) else served
    return f"url must be {expected} (got {url!r}); {other}"


def scoring_request(request, adapters=frozenset()) -> tuple[dict | None, str | None]:
    """A parsed scoring line as ``{"kind", "pairs", "top_n"}`` and None, or None and why it is not one."""
    line, why = read_as(request, RequestLine)
    if line is None:
        return None, why
    kind = scoring_kind(line.url)
    if kind is None:
        return None, wrong_url(line.url, SCORING)
    model: type[RerankBody] | type[ScoreBody] = RerankBody if kind == "rerank" else ScoreBody
    body, why = read_as(line.body, model, "body")
    if body is None:
        return None, why
    try:
        _check_body(body, adapters)
        pairs, top_n = _rerank_pairs(body) if isinstance(body, RerankBody) else (_score_pairs(body), 0)
    except ValueError as exc:
        return None, str(exc)
    return {"kind": kind, "pairs": pairs, "top_n": top_n}, None


def _check_body(body: ScoringBody, adapters) -> None:
    refused = [k for k in body.REFUSED if getattr(body, k)]
    if refused:
        raise ValueError(f"body.{refused[0]} is not supported (pairs are scored whole, with the score prompt)")
    if body.use_activation is False:
        raise ValueError("body.use_activation false is not supported (a score is a probability)")
    if body.model in adapters:
        raise ValueError(f"body.model {body.model!r} names an adapter, and scores do not use adapters yet")


def _texts(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]


def _score_pairs(body: ScoreBody) -> list[tuple[str, str]]:
    fields = next(
        (f for f in body.SPELLINGS if getattr(body, f[0]) is not None and getattr(body, f[1]) is not None), None
    )
    if fields is None:
        raise ValueError(
            "body must have queries and documents (or queries and items, data_1 and data_2, text_1 and text_2)"
        )
    queries, documents = _texts(getattr(body, fields[0])), _texts(getattr(body, fields[1]))
    if not queries:
        raise ValueError("At least one text element must be given")
    if not documents:
        raise ValueError("At least one text_pair element must be given")
    if len(queries) > 1 and len(queries) != len(documents):
        raise ValueError(
            f"Input lengths must be either 1:1, 1:N or N:N (got {len(queries)} {fields[0]} and "
            f"{len(documents)} {fields[1]})"
        )
    return list(zip(queries * len(documents) if len(queries) == 1 else queries, documents))


def _rerank_pairs(body: RerankBody) -> tuple[list[tuple[str, str]], int]:
    documents = _texts(body.documents)
    if not documents:
        raise ValueError("At least one text_pair element must be given")
    top_n = body.top_n or 0
    if top_n < 0:
        raise ValueError(f"body.top_n must be a whole number, 0 or more (got {top_n!r})")
    return [(body.query, d) for d in documents], top_n


def line_rows(line: int, request, error: str | None, adapters=frozenset()) -> list[tuple]:
    """A line's rows as ``(row or None, error or None, carry)``: one per pair, or one error row for a bad line."""
    custom_id = request.get("custom_id") if isinstance(request, dict) else None
    if error is None:
        scoring, error = scoring_request(request, adapters)
    if error is not None:
        return [(None, error, {"line": line, "custom_id": custom_id})]
    assert scoring is not None  # no error means a request
    kind, top_n = scoring["kind"], scoring["top_n"]
    out = []
    for i, (query, document) in enumerate(scoring["pairs"]):
        carry = {"line": line, "custom_id": custom_id, "kind": kind, "index": i, "top_n": top_n}
        if kind == "rerank":
            carry["document"] = document
        out.append(({"document": document, "query": query}, None, carry))
    return out


def lines_of(rows: list[dict], first: int, model: str, created: int, max_tokens: int = 0) -> str:
    """A merged part's rows, whose ``id`` is each row's carry, as output lines numbered from ``first``."""
    return "".join(_line(first + k, group, model, created) + "\n" for k, group in enumerate(by_line(rows)))


def _line(number: int, group: list[tuple[dict, dict]], model: str, created: int) -> str:
    """One line's response, or the error of the line or of its first failed pair."""
    failed = error_line(number, group, "pair")
    if failed is not None:
        return failed
    if group[0][0]["kind"] == "rerank":
        return answered_line(number, group, _rerank_body(number, group, model))
    prompt, cached = row_tokens(group)
    usage = Usage(prompt_tokens=prompt, total_tokens=prompt, prompt_tokens_details=PromptTokensDetails(cached))
    scores = [ScoreData(index=c["index"], score=r["score"]) for c, r in group]
    body = ScoreResponse(id=f"score-{number}", created=created, model=model, data=scores, usage=usage)
    return answered_line(number, group, body)


def _rerank_body(number: int, group, model: str) -> RerankResponse:
    """vLLM's ``RerankResponse``: the documents by score, highest first with ties in their order, cut at ``top_n``."""
    prompt, _ = row_tokens(group)
    results = [
        RerankResult(index=c["index"], document=RerankDocument(text=c["document"]), relevance_score=r["score"])
        for c, r in group
    ]
    results.sort(key=lambda x: x.relevance_score, reverse=True)
    top_n = group[0][0]["top_n"]
    if 0 < top_n < len(results):
        results = results[:top_n]
    return RerankResponse(id=f"score-{number}", model=model, usage=PromptUsage(prompt, prompt), results=results)
