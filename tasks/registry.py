"""The task registry: every task a config or a batch line can name, and what each declares.

Code outside tasks/ asks the registry instead of comparing task names. This package imports
nothing from pipeline/, so a classification model's head labels are handed in by the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tasks.base import TaskKind
from tasks.chat import Chat
from tasks.classify import HEAD_TEMPLATE, SCORE_TEMPLATE, Classify
from tasks.columns import Columns
from tasks.completion import Completion
from tasks.document_question import DocumentQuestion
from tasks.embed import DEFAULT_TEMPLATE as EMBED_TEMPLATE
from tasks.embed import Embed
from tasks.generate import Generate
from tasks.template import PromptTemplate, TemplateError, template_columns

# What every task that generates text writes; the optional fields only as asked
ANSWER_FIELDS = (
    "answer",
    "error",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "shard",
    "latency_s",
    "finish_reason",
    "answer_json",
    "logprobs",
    "choices",
)
EMBED_FIELDS = ("embedding", "error", "prompt_tokens", "shard", "latency_s")
CLASSIFY_FIELDS = ("label", "label_probs", "error", "prompt_tokens", "cached_tokens", "shard", "latency_s")
SCORE_FIELDS = ("score", "error", "prompt_tokens", "cached_tokens", "shard", "latency_s")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    writes: tuple[str, ...]  # the result fields a job of the task writes
    served_by: tuple[str, ...]  # what an engine must serve to run it ("generate", "embed", "classify")
    default_template: str | None  # the template it uses when prompt.template is not set
    reads_template: bool  # prompt.template shapes its prompts
    needs_template: bool = False  # ... and must be given
    reads_labels: bool = False  # prompt.labels are its answers to weigh (read with the tokenizer)
    fixed_columns: Columns | None = None  # the columns it reads when no template decides them
    answers: bool = True  # it generates text (its own fields: an answer's, as sampling asks)
    embeds: bool = False  # its rows are texts to embed, not prompts
    keeps_space: bool = False  # its answers keep the text as generated (a completion continues its prompt)
    build: Callable[..., TaskKind] | None = None  # (config's prompt, tokenizer, head) -> its kind

    def columns(self, template: str | None, head: tuple[str, ...] | None = None) -> Columns:
        """The columns the task reads with ``template``, and those it writes."""
        if self.fixed_columns is not None:
            return Columns(**{**self.fixed_columns.__dict__, "writes": self.writes})
        text = template or (HEAD_TEMPLATE if head and self.reads_labels else self.default_template)
        if text is None:
            raise TemplateError(f"task {self.name} needs prompt.template")
        return Columns(required=tuple(template_columns(text)), writes=self.writes)

    def unserved(self, engine_tasks, model: str) -> str | None:
        """Why engines serving ``engine_tasks`` cannot run a job of this task, or None."""
        if set(self.served_by) & set(engine_tasks):
            return None
        if self.embeds:
            kind = "a classification model" if "classify" in engine_tasks else "a generation model"
            return (
                f"task embed needs an embedding model, and this cluster's engines run {model}, {kind}; "
                f"set model.path to an embedding model (e.g. all-MiniLM-L6-v2) and run the job on a "
                f'cluster of its own (docs/usage.md, "Embeddings")'
            )
        if "classify" in engine_tasks:
            serves = " and ".join(t.name for t in TASKS.values() if "classify" in t.served_by)
            return (
                f"this cluster's engines run {model}, a classification model, which serves only tasks {serves} "
                f"(this job's task is {self.name}); run the job on a cluster of a generation model"
            )
        return (
            f"this cluster's engines run {model}, an embedding model, which serves only task embed (this "
            f"job's task is {self.name}); run the job on a cluster of a generation model"
        )


def _template(p, tokenizer, head):
    return PromptTemplate(
        tokenizer, p.template, system=p.system, prefix_column=p.prefix_column, chat_template=p.chat_template
    )


def _classify(score: bool):
    def build(p, tokenizer, head):
        return Classify(
            tokenizer,
            p.template,
            p.labels,
            score=score,
            system=p.system,
            prefix_column=p.prefix_column,
            chat_template=p.chat_template,
            head=head,
        )

    return build


GENERATION = ("generate",)
LABELLED = ("classify", "generate")  # a classification model's head, or a generation model's next token

TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in [
        TaskSpec(
            "document_question",
            ANSWER_FIELDS,
            GENERATION,
            None,
            reads_template=False,
            fixed_columns=Columns(required=("document", "question")),
            build=lambda p, tokenizer, head: DocumentQuestion(tokenizer, system=p.system),
        ),
        TaskSpec(
            "template", ANSWER_FIELDS, GENERATION, None, reads_template=True, needs_template=True, build=_template
        ),
        TaskSpec(
            "generate",
            ANSWER_FIELDS,
            GENERATION,
            None,
            reads_template=False,
            fixed_columns=Columns(one_of=("prompt", "messages"), optional=("prefix",), lists=("messages",)),
            build=lambda p, tokenizer, head: Generate(tokenizer, system=p.system, chat_template=p.chat_template),
        ),
        TaskSpec(
            "chat",
            ANSWER_FIELDS,
            GENERATION,
            None,
            reads_template=False,
            build=lambda p, tokenizer, head: Chat(tokenizer),
        ),
        TaskSpec(
            "completion",
            ANSWER_FIELDS,
            GENERATION,
            None,
            reads_template=False,
            keeps_space=True,
            fixed_columns=Columns(required=("prompt",), optional=("prefix",)),
            build=lambda p, tokenizer, head: Completion(),
        ),
        TaskSpec(
            "embed",
            EMBED_FIELDS,
            ("embed",),
            EMBED_TEMPLATE,
            reads_template=True,
            answers=False,
            embeds=True,
            build=lambda p, tokenizer, head: Embed(tokenizer, p.template, prefix_column=p.prefix_column),
        ),
        TaskSpec(
            "classify",
            CLASSIFY_FIELDS,
            LABELLED,
            EMBED_TEMPLATE,
            reads_template=True,
            reads_labels=True,
            answers=False,
            build=_classify(score=False),
        ),
        TaskSpec(
            "score",
            SCORE_FIELDS,
            LABELLED,
            SCORE_TEMPLATE,
            reads_template=True,
            reads_labels=True,
            answers=False,
            build=_classify(score=True),
        ),
    ]
}
CONFIG_TASKS = ("document_question", "template", "generate", "embed", "classify", "score")  # ``task:``'s values


def spec_or_generate(name: str | None) -> TaskSpec:
    """The spec of task ``name``; a kind of the user's own runs as the generate task."""
    return TASKS.get(name or "", TASKS["generate"])


def spec(name: str) -> TaskSpec:
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(CONFIG_TASKS)}") from None


def task_kind(task: str, prompt, tokenizer, head: tuple[str, ...] | None = None) -> TaskKind:
    """Task ``task``'s kind, built from the config's ``prompt:`` section and the model's tokenizer."""
    built = spec(task).build
    if built is None:
        raise TemplateError(f"task {task} is not built from a config")
    return built(prompt, tokenizer, head)


def scoring_requests_kind(task: str, prompt, tokenizer, head: tuple[str, ...] | None = None) -> TaskKind:
    """The kind that answers scoring requests: the config's score task, whose template may read
    only ``document`` and ``query``, else the score task's defaults."""
    score = TASKS["score"]
    if task != score.name:
        return Classify(tokenizer, score=True)
    columns = set(template_columns(prompt.template)) if prompt.template else set()
    if columns - {"document", "query"}:
        raise TemplateError(
            f"prompt.template reads {', '.join(sorted(columns - {'document', 'query'}))}; a "
            f"scoring request's pairs have only document and query"
        )
    return task_kind(score.name, prompt, tokenizer, head)


def unserved(task: str, engine_tasks, model: str) -> str | None:
    """Why engines serving ``engine_tasks`` cannot run a job of ``task``, or None."""
    return spec_or_generate(task).unserved(engine_tasks, model)
