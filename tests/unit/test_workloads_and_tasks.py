import pytest

from pipeline.bench.workloads import document_questions, skewed_counts
from tasks import RowError
from tasks.document_question import DocumentQuestion


class ChatMLTokenizer:
    """Enough of a Hugging Face tokenizer for the task kind: a ChatML chat template."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        text = "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        for m in messages:
            text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def test_same_seed_same_rows_and_planted_facts_present():
    a = document_questions(8, 4, seed=3)
    assert a == document_questions(8, 4, seed=3)
    assert a != document_questions(8, 4, seed=4)
    assert len(a) == 32 and len({r["id"] for r in a}) == 32
    for r in a:
        assert r["expected"] in r["document"]


def test_orders():
    inter = document_questions(4, 3, order="interleaved")
    assert [r["doc_id"] for r in inter[:4]] == ["d00000", "d00001", "d00002", "d00003"]
    grouped = document_questions(4, 3, order="grouped")
    assert [r["doc_id"] for r in grouped[:3]] == ["d00000"] * 3
    shuffled = document_questions(4, 3, order="shuffled")
    assert sorted(r["question"] for r in shuffled) == sorted(r["question"] for r in grouped)


def test_skewed_counts_are_skewed_and_sum():
    c = skewed_counts(64, 256, seed=1)
    assert sum(c) == 256 and min(c) >= 1 and max(c) >= 8 * sorted(c)[32]


def test_document_question_prefix_is_shared_and_question_last():
    task = DocumentQuestion(ChatMLTokenizer())
    a = task.split({"document": "Doc text.", "question": "Q1?"})
    b = task.split({"document": "Doc text.", "question": "Q2?"})
    assert a.prefix == b.prefix and "Doc text." in a.prefix and "Q1?" not in a.prefix
    assert a.suffix.startswith("Question: Q1?") and a.suffix.endswith("<|im_start|>assistant\n")
    assert a.prefix.startswith("<|im_start|>system")


@pytest.mark.parametrize(
    "row, message",
    [
        ({"document": None, "question": "q"}, "document is null"),
        ({"document": "d", "question": "  "}, "question is empty"),
        ({"document": 5, "question": "q"}, "document is not text"),
        ({"question": "q"}, "column document is missing"),
    ],
)
def test_bad_rows_raise_row_error(row, message):
    with pytest.raises(RowError, match=message):
        DocumentQuestion(ChatMLTokenizer()).split(row)
