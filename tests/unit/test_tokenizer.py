"""The client's tokenizer (no transformers import) gives what transformers gives."""

import pytest
from transformers import AutoTokenizer

from pipeline.client.tokenizer import FolderTokenizer, load_tokenizer
from pipeline.config import load_config
from pipeline.model import resolve_model
from tasks import Chat, DocumentQuestion

CONVERSATIONS = [
    [{"role": "user", "content": "What is the pet of Ada?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Name a colour:\n  red?"},
    ],
]
TEXTS = ["The pet of Ada Lovel is a parrot.", "  spaces\tand\nnewlines ", "ünïcödé – 数字 123", "<|im_start|>user"]


@pytest.fixture(scope="module")
def both():
    model = resolve_model(load_config())
    return load_tokenizer(model), AutoTokenizer.from_pretrained(model)


def test_the_default_model_loads_without_transformers(both):
    assert isinstance(both[0], FolderTokenizer)


@pytest.mark.parametrize("generation_prompt", [True, False])
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_templates_render_as_transformers_renders_them(both, messages, generation_prompt):
    light, hf = both
    assert light.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    ) == hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    assert light.apply_chat_template(messages, add_generation_prompt=generation_prompt) == hf.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, return_dict=False
    )


def test_token_ids_are_transformers_ids(both):
    light, hf = both
    for special in (False, True):
        assert (
            light(TEXTS, add_special_tokens=special)["input_ids"] == hf(TEXTS, add_special_tokens=special)["input_ids"]
        )
        assert [light.encode(t, add_special_tokens=special) for t in TEXTS] == [
            hf.encode(t, add_special_tokens=special) for t in TEXTS
        ]


def test_tasks_split_rows_the_same_with_either(both):
    light, hf = both
    row = {"document": "Ada has a parrot.", "question": "What pet?"}
    assert DocumentQuestion(light).split(row) == DocumentQuestion(hf).split(row)
    chat = {"messages": CONVERSATIONS[1]}
    assert Chat(light).split(chat) == Chat(hf).split(chat)


def test_a_client_that_only_renders_prompts_never_loads_the_vocabulary(both):
    """A document question is rendered without the vocabulary (~30 MB of the caller's memory); encoding loads it."""
    tokenizer = load_tokenizer(both[0].folder)
    DocumentQuestion(tokenizer).split({"document": "Ada has a parrot.", "question": "What pet?"})
    assert "_tk" not in vars(tokenizer)
    assert tokenizer.encode(TEXTS[0]) == both[1].encode(TEXTS[0])
    assert "_tk" in vars(tokenizer)
