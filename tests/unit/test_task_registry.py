"""The task registry (tasks/registry.py): every task a config or a batch line names is declared
once, with what it reads, writes and needs of the engine; the code asks it."""

import typing

import pytest

from pipeline.config import Config, load_config
from pipeline.results import RESULT_FIELDS, output_fields
from tasks import TASKS, spec, task_columns
from tasks.registry import CONFIG_TASKS, unserved


def test_every_config_task_is_declared_and_the_config_offers_exactly_those():
    assert set(CONFIG_TASKS) <= set(TASKS) and set(TASKS) - set(CONFIG_TASKS) == {"chat", "completion"}
    assert typing.get_args(Config.model_fields["task"].annotation) == CONFIG_TASKS
    for task in TASKS.values():
        assert set(task.writes) <= set(RESULT_FIELDS) and "error" in task.writes


def test_what_a_task_reads_and_writes_comes_from_its_spec():
    config = load_config()
    assert task_columns(config).required == ("document", "question")
    embed = config.replace(task="embed")
    assert task_columns(embed).required == ("document",) and task_columns(embed).writes == spec("embed").writes
    classify = config.replace(task="classify", prompt={"template": "Review: {review}", "labels": ["a", "b"]})
    assert task_columns(classify).required == ("review",)
    assert task_columns(config.replace(task="classify"), head=("neg", "pos")).required == ("text",)  # (the head's)
    assert output_fields(config.sampling.as_sampling(0), (), "score") == list(spec("score").writes)
    assert "answer" in output_fields(config.sampling.as_sampling(0), (), "chat")


@pytest.mark.parametrize(
    "task, engines, refused",
    [
        ("embed", {"generate"}, "task embed needs an embedding model"),
        ("classify", {"classify"}, None),
        ("score", {"generate"}, None),
        ("chat", {"generate"}, None),
        ("generate", {"classify"}, "a classification model, which serves only tasks classify and score"),
        ("document_question", {"embed"}, "an embedding model, which serves only task embed"),
        ("a-kind-of-my-own", {"generate"}, None),
    ],
)
def test_a_task_the_engines_cannot_serve_is_refused_with_why(task, engines, refused):
    why = unserved(task, engines, "m")
    assert why is None if refused is None else refused in why, why
