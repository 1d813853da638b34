"""An agent's input request (``turn.ask``) as ``agenthost-protocol chat`` shows and answers it.

Pure text in, model values out: :func:`request_lines` and :func:`question_lines`
say what to show, :func:`prompt_for` the prompt, :func:`parse_answer` turns
the line the user typed into a submitted :data:`~agenthost_protocol.types.ChatInputAnswer`
(or raises :class:`BadAnswer`).  The strings returned hold host text as it
came: the caller writes them through :func:`~.terminal.safe_text`.

One line answers one question:

==============  =================================================================
kind            the line
==============  =================================================================
text            the text as typed
number          a decimal number (``3``, ``-2.5``, ``1e3``); within ``min``/``max``
integer         a whole number; within ``min``/``max``
boolean         ``y``/``yes``/``true``/``1`` or ``n``/``no``/``false``/``0``
single-select   an option's number (1, 2 ...), or its label or id (any case); other
                text when the question allows free-form input
multi-select    such choices separated by commas (``1, 3``); within ``min``/``max``
==============  =================================================================

An empty line takes the question's default (``defaultValue``; for a select,
the options marked ``recommended``), or skips a question that is not required
and has none.  A question of a kind this version does not know is skipped (a
required one cannot be answered: the request is declined).
"""

from __future__ import annotations

import math
from typing import Final

from .. import types as t

__all__ = [
    "CANCEL",
    "DECLINE",
    "MAX_OPTIONS",
    "MAX_QUESTIONS",
    "BadAnswer",
    "answerable",
    "parse_answer",
    "prompt_for",
    "question_lines",
    "request_lines",
]

DECLINE: Final = "/decline"
"""The line that declines the whole request (``response: decline``)."""
CANCEL: Final = "/cancel"
"""The line that cancels the whole request (``response: cancel``)."""

MAX_QUESTIONS: Final = 64
"""A request with more questions is declined unasked (nobody answers a thousand prompts)."""
MAX_OPTIONS: Final = 256
"""A select question with more options is declined unasked (the same)."""

_YES: Final = frozenset({"y", "yes", "true", "1"})
_NO: Final = frozenset({"n", "no", "false", "0"})


class BadAnswer(ValueError):
    """The line does not answer the question; the message says why."""


def _kind(question: t.ChatInputQuestion) -> str:
    return str(getattr(question.kind, "value", question.kind))


def _number(value: float) -> str:
    value = float(value)  # the wire gives an int for 3
    return str(int(value)) if value.is_integer() else repr(value)


def _default_options(question: t.ChatInputSingleSelectQuestion | t.ChatInputMultiSelectQuestion
                     ) -> list[int]:
    return [i for i, option in enumerate(question.options) if option.recommended]


def answerable(request: t.ChatInputRequest) -> str | None:
    """Why ``chat`` cannot put ``request`` to the user (it declines it then), or ``None``."""
    questions = request.questions or ()
    if len(questions) > MAX_QUESTIONS:
        return f"{len(questions)} questions (more than {MAX_QUESTIONS})"
    for question in questions:
        if isinstance(question, t.UnknownChatInputQuestion):
            if question.raw.get("required") is True:
                return f"a required question of an unknown kind ({question.kind})"
        elif isinstance(question, (t.ChatInputSingleSelectQuestion,
                                   t.ChatInputMultiSelectQuestion)):
            if len(question.options) > MAX_OPTIONS:
                return f"{len(question.options)} options (more than {MAX_OPTIONS})"
            if not question.options and not question.allow_freeform_input and (
                    question.required):
                return f"a required question with no option ({question.id})"
    return None


def request_lines(request: t.ChatInputRequest) -> list[str]:
    """The request's heading: its message and its URL."""
    lines = [f"[the agent asks] {request.message}" if request.message else "[the agent asks]"]
    if request.url:
        lines.append(f"  open: {request.url}")
    return lines


def question_lines(question: t.ChatInputQuestion, number: int, count: int) -> list[str]:
    """What to show before the prompt of ``question`` (the ``number``-th of ``count``)."""
    head = f"  ({number}/{count}) " if count > 1 else "  "
    if isinstance(question, t.UnknownChatInputQuestion):
        return [f"{head}a question of a kind this client does not know ({question.kind}): "
                "skipped"]
    title = f"{question.title}: " if question.title else ""
    required = " (required)" if question.required else ""
    lines = [f"{head}{title}{question.message}{required}"]
    if isinstance(question, (t.ChatInputSingleSelectQuestion, t.ChatInputMultiSelectQuestion)):
        for i, option in enumerate(question.options, 1):
            mark = " (recommended)" if option.recommended else ""
            about = f" - {option.description}" if option.description else ""
            lines.append(f"    {i}) {option.label}{mark}{about}")
    return lines


def prompt_for(question: t.ChatInputQuestion) -> str:
    """The prompt of ``question``: what it takes and its default, in brackets."""
    hints: list[str] = []
    default = False
    if isinstance(question, t.ChatInputTextQuestion):
        if question.format:
            hints.append(question.format)
        if question.min is not None or question.max is not None:
            hints.append(_range(question.min, question.max) + " characters")
        if question.default_value is not None:
            hints.append(f"default: {question.default_value}")
            default = True
        label = "answer"
    elif isinstance(question, t.ChatInputNumberQuestion):
        label = "whole number" if _kind(question) == "integer" else "number"
        if question.min is not None or question.max is not None:
            hints.append(_range(question.min, question.max))
        if question.default_value is not None:
            hints.append(f"default: {_number(question.default_value)}")
            default = True
    elif isinstance(question, t.ChatInputBooleanQuestion):
        default = question.default_value is not None
        label = "Y/n" if question.default_value is True else (
            "y/N" if question.default_value is False else "y/n")
    elif isinstance(question, t.ChatInputSingleSelectQuestion):
        label = f"choose 1-{len(question.options)}" if question.options else "answer"
        if question.allow_freeform_input and question.options:
            hints.append("or type your own")
        defaults = _default_options(question)
        if defaults:
            hints.append(f"default: {defaults[0] + 1}")
            default = True
    elif isinstance(question, t.ChatInputMultiSelectQuestion):
        label = "choose, comma-separated"
        if question.allow_freeform_input:
            hints.append("or type your own")
        if question.min is not None or question.max is not None:
            hints.append("how many: " + _range(question.min, question.max))
        defaults = _default_options(question)
        if defaults:
            hints.append("default: " + ",".join(str(i + 1) for i in defaults))
            default = True
    else:
        return ""
    needs_some = isinstance(question, t.ChatInputMultiSelectQuestion) and (question.min or 0) > 0
    if not question.required and not default and not needs_some:
        hints.append("empty: skip")
    return f"  {label}" + (f" [{'; '.join(hints)}]" if hints else "") + ": "


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"{_number(low)}-{_number(high)}"
    if low is not None:
        return f"at least {_number(low)}"
    assert high is not None
    return f"at most {_number(high)}"


def _submitted(value: t.ChatInputAnswerValue) -> t.ChatInputAnswer:
    return t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED, value=value)


def _empty(question: t.ChatInputQuestion) -> t.ChatInputAnswer:
    if getattr(question, "required", False):
        raise BadAnswer("an answer is required")
    return t.ChatInputSkipped()


def parse_answer(question: t.ChatInputQuestion, line: str) -> t.ChatInputAnswer:
    """The submitted answer the ``line`` gives to ``question`` (see the module's table).

    Raises :class:`BadAnswer` when it gives none.  An empty line gives the
    default, else skips (a required question: :class:`BadAnswer`).
    """
    if isinstance(question, t.UnknownChatInputQuestion):
        return t.ChatInputSkipped()
    if isinstance(question, t.ChatInputTextQuestion):
        return _text(question, line)
    text = line.strip()
    if isinstance(question, t.ChatInputNumberQuestion):
        return _numeric(question, text)
    if isinstance(question, t.ChatInputBooleanQuestion):
        if not text:
            if question.default_value is None:
                return _empty(question)
            return _submitted(t.ChatInputBooleanAnswerValue(value=question.default_value))
        if text.lower() in _YES:
            return _submitted(t.ChatInputBooleanAnswerValue(value=True))
        if text.lower() in _NO:
            return _submitted(t.ChatInputBooleanAnswerValue(value=False))
        raise BadAnswer("answer y or n")
    if isinstance(question, t.ChatInputSingleSelectQuestion):
        return _single(question, text)
    return _many(question, text)


def _text(question: t.ChatInputTextQuestion, line: str) -> t.ChatInputAnswer:
    if not line:
        if question.default_value is None:
            return _empty(question)
        line = question.default_value
    if question.min is not None and len(line) < question.min:
        raise BadAnswer(f"at least {question.min} characters, please")
    if question.max is not None and len(line) > question.max:
        raise BadAnswer(f"at most {question.max} characters, please")
    return _submitted(t.ChatInputTextAnswerValue(value=line))


def _numeric(question: t.ChatInputNumberQuestion, text: str) -> t.ChatInputAnswer:
    integer = _kind(question) == "integer"
    if not text:
        if question.default_value is None:
            return _empty(question)
        value = float(question.default_value)
    else:
        try:
            if "_" in text:  # float() takes "1_000"; a person means something else
                raise ValueError(text)
            value = float(text)
        except ValueError:
            raise BadAnswer("a whole number, please" if integer else "a number, please"
                            ) from None
        if not math.isfinite(value):
            raise BadAnswer("a finite number, please")
    if integer and not value.is_integer():
        raise BadAnswer("a whole number, please")
    if question.min is not None and value < question.min:
        raise BadAnswer(f"at least {_number(question.min)}, please")
    if question.max is not None and value > question.max:
        raise BadAnswer(f"at most {_number(question.max)}, please")
    return _submitted(t.ChatInputNumberAnswerValue(value=value))


def _option(options: tuple[t.ChatInputOption, ...], text: str) -> t.ChatInputOption | None:
    """The option ``text`` names: its number, else its label or id (case folded)."""
    if text.isdigit() and text.isascii():
        index = int(text)
        return options[index - 1] if 1 <= index <= len(options) else None
    folded = text.casefold()
    for option in options:
        if option.label.strip().casefold() == folded:
            return option
    for option in options:
        if option.id.casefold() == folded:
            return option
    return None


def _single(question: t.ChatInputSingleSelectQuestion, text: str) -> t.ChatInputAnswer:
    if not text:
        defaults = _default_options(question)
        if not defaults:
            return _empty(question)
        return _submitted(t.ChatInputSelectedAnswerValue(
            value=question.options[defaults[0]].id))
    option = _option(question.options, text)
    if option is not None:
        return _submitted(t.ChatInputSelectedAnswerValue(value=option.id))
    if question.allow_freeform_input:
        return _submitted(t.ChatInputSelectedAnswerValue(value=text, freeform_values=(text,)))
    raise BadAnswer(f"choose one of 1-{len(question.options)} (or an option's name)")


def _many(question: t.ChatInputMultiSelectQuestion, text: str) -> t.ChatInputAnswer:
    chosen: list[str] = []
    freeform: list[str] = []
    if not text:
        defaults = _default_options(question)
        if not defaults:
            if question.required or (question.min or 0) > 0:
                raise BadAnswer("an answer is required" if question.required
                                else f"choose at least {question.min}")
            return t.ChatInputSkipped()
        chosen = [question.options[i].id for i in defaults]
    else:
        for item in (piece.strip() for piece in text.split(",")):
            if not item:
                continue
            option = _option(question.options, item)
            if option is not None:
                if option.id not in chosen:
                    chosen.append(option.id)
            elif question.allow_freeform_input:
                if item not in freeform:
                    freeform.append(item)
            else:
                raise BadAnswer(f"no option {item!r}: choose among 1-{len(question.options)}, "
                                "separated by commas")
    count = len(chosen) + len(freeform)
    if question.min is not None and count < question.min:
        raise BadAnswer(f"choose at least {question.min}")
    if question.max is not None and count > question.max:
        raise BadAnswer(f"choose at most {question.max}")
    return _submitted(t.ChatInputSelectedManyAnswerValue(
        value=tuple(chosen), freeform_values=tuple(freeform) or None))
