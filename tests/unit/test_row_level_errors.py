"""Row-level pieces without a cluster: the chat task kind, the context-length rule, and a
failing engine request inside a worker batch."""

import asyncio

import pyarrow as pa
import pytest

from pipeline import load_config
from pipeline.results import ErrorKind, RowResult
from pipeline.sampling import Sampling
from pipeline.steps.prompt_table import prompt_rows_from
from pipeline.worker.admission import FairAdmission
from pipeline.worker.engine import Generation
from pipeline.worker.gcstats import GcPauses
from pipeline.worker.metrics import ShardMetrics
from pipeline.worker.plugin import EnginePlugin
from pipeline.worker.prompt_fit import fit_prompt
from tasks import Chat, RowError
from tests.unit.test_workloads_and_tasks import ChatMLTokenizer


def test_single_turn_chat_is_one_prompt_split_after_the_users_text():
    chat = Chat(ChatMLTokenizer())
    parts = chat.split({"messages": [{"role": "user", "content": "Hi there"}]})
    assert parts.prefix.endswith("<|im_start|>user\nHi there")
    assert parts.prefix + parts.suffix == ChatMLTokenizer().apply_chat_template(
        [{"role": "user", "content": "Hi there"}], add_generation_prompt=True
    )


def test_multi_turn_chats_share_the_conversation_before_the_last_user_message():
    chat = Chat(ChatMLTokenizer())
    history = [{"role": "user", "content": "Long shared document ..."}, {"role": "assistant", "content": "Ok."}]
    a = chat.split({"messages": history + [{"role": "user", "content": "First question?"}]})
    b = chat.split({"messages": history + [{"role": "user", "content": [{"type": "text", "text": "Second?"}]}]})
    assert a.prefix == b.prefix and a.prefix.endswith("<|im_start|>user\n")
    assert a.suffix.startswith("First question?") and b.suffix.startswith("Second?")


@pytest.mark.parametrize(
    "messages, error",
    [
        (None, "messages is missing"),
        ([], "messages must be a non-empty list"),
        ([{"role": "robot", "content": "x"}], "messages[0].role must be one of"),
        ([{"role": "system", "content": "x"}], "messages has no user message"),
        ([{"role": "user", "content": None}], "messages[0].content is null"),
        ([{"role": "user", "content": 5}], "messages[0].content is not text (got int)"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "only text parts are supported"),
    ],
)
def test_bad_chat_messages_are_row_errors(messages, error):
    with pytest.raises(RowError) as err:
        Chat(ChatMLTokenizer()).split({"messages": messages})
    assert error in str(err.value)


def test_context_rule_matches_vllm_and_truncation_keeps_the_rows_own_part():
    ids, error = fit_prompt([1] * 90, [2] * 9, max_model_len=100, max_tokens=10, truncate=False)
    assert error is None and len(ids) == 99  # vLLM accepts up to max_model_len - 1
    ids, error = fit_prompt([1] * 91, [2] * 9, max_model_len=100, max_tokens=10, truncate=False)
    assert ids == [] and error.startswith("prompt too long (100 tokens;")  # the worker adds its kind
    ids, error = fit_prompt([1] * 300, [2] * 9, max_model_len=100, max_tokens=10, truncate=True)
    assert error is None and ids == [1] * 81 + [2] * 9  # room left for max_tokens new tokens
    ids, error = fit_prompt([1] * 10, [2] * 95, max_model_len=100, max_tokens=10, truncate=True)
    assert ids == [] and "the row's own part alone is 95 tokens" in error


class FailingOn:
    """An engine whose request fails when its prompt holds a given token (as vLLM fails one
    request with a validation or runtime error while the others are served)."""

    block_size, kv_cache_tokens, max_model_len = 16, 0, 2048
    tasks, embedding_size, special_tokens = ("generate",), None, 0

    def __init__(self, bad_token):
        self.bad_token = bad_token

    def encode(self, text):
        return [ord(c) for c in text]

    async def generate(self, prompt_ids, request_id, sampling, priority=0):
        if self.bad_token in prompt_ids:
            raise ValueError("sampling failed")
        return Generation(text=" answer ", prompt_tokens=len(prompt_ids), cached_tokens=0, completion_tokens=1)


def test_an_engine_failure_fails_only_its_own_row():
    plugin = EnginePlugin(load_config(), model="unused", engine_kind="fake")
    plugin.engine, plugin.shard = FailingOn(ord("!")), "s0"
    plugin.metrics, plugin._dead = ShardMetrics("s0", GcPauses()), False

    async def run():
        plugin._intake, plugin.token_gate = FairAdmission(4), None
        rows = prompt_rows_from(
            pa.array(["doc ", "doc "], pa.large_string()),
            pa.array(["fine?", "boom!"], pa.large_string()),
            pa.nulls(2, pa.string()),
            pa.array([7, 8], pa.int64()),
            {},
        ).rows
        return await plugin.answer_grouped(rows, "b", Sampling(), False)

    results = {r.index: r for r in asyncio.run(run())}
    assert results[7].answer == "answer" and results[7].error is None
    assert results[8].answer is None and results[8].error == "engine: ValueError: sampling failed"
    assert results[8].error_kind is ErrorKind.ENGINE and results[8].error_group == "engine: ValueError"


def test_errors_are_counted_by_kind_and_reason_without_particulars():
    groups = [
        RowResult.failed(0, ErrorKind.INPUT, "prompt too long (3000 tokens; the model's context is 2048)"),
        RowResult.failed(1, ErrorKind.ENGINE, "ValueError: sampling failed (seed 3)"),
        RowResult.failed(2, ErrorKind.WORKER, "shard cpu1 lost its worker"),
        RowResult.failed(3, ErrorKind.OUTPUT, "answer is not JSON; expected an object"),
        RowResult(4, answer="fine"),
    ]
    assert [r.error_group for r in groups] == [
        "input: prompt too long",
        "engine: ValueError",
        "worker: shard cpu1 lost its worker",
        "output: answer is not JSON",
        None,
    ]
    assert groups[0].error == "input: prompt too long (3000 tokens; the model's context is 2048)"
