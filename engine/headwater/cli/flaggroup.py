"""One dataclass as a group of typer options, shared by every command that takes the group.

A flags dataclass lists its options once, each field annotated for typer::

    Subjects = Annotated[list[str] | None, typer.Option("--subjects", help="...")]

    @dataclass(frozen=True)
    class StreamFlags:
        subjects: Subjects = None
        ...

and a command takes the whole group as one parameter::

    @app.command("add")
    @flag_group(StreamFlags)
    def add(ctx: typer.Context, name: NameArg = None, flags: StreamFlags = StreamFlags(),
            as_json: JsonOpt = False) -> None: ...

Typer then sees ``add`` with the dataclass's fields in place of ``flags`` (so ``--help`` lists
them where ``flags`` stands), and the command receives one ``StreamFlags`` built from the
values. The ``flags`` parameter needs a default only where Python requires one (after other
parameters with defaults); the decorator ignores it.

Typer reads a command's parameters with ``inspect.signature(func, eval_str=True)`` and
``typing.get_type_hints(func)``; the wrapper therefore carries a ``__signature__`` and
``__annotations__`` of evaluated objects (the modules use ``from __future__ import
annotations``, so the raw annotations are strings naming things in another module).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def flag_group(cls: type, param: str = "flags") -> Callable[[F], F]:
    """Expose the fields of the dataclass ``cls`` as the options of a command's ``param``.

    The decorated function keeps its own parameters; ``param`` is replaced by one keyword
    parameter per field of ``cls`` (annotation and default taken from the field), and on a
    call those values are gathered into ``cls(**values)`` and passed on as ``param``. Apply
    it below ``@app.command(...)``. The wrapper takes keyword arguments only, which is how
    typer calls a command; fields not passed keep the dataclass defaults.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"flag_group needs a dataclass, not {cls!r}")
    fields = [field for field in dataclasses.fields(cls) if field.init]
    field_hints = typing.get_type_hints(cls, include_extras=True)

    def decorate(func: F) -> F:
        signature = inspect.signature(func)
        if param not in signature.parameters:
            raise TypeError(f"{func.__qualname__} has no parameter {param!r} for {cls.__name__}")
        hints = typing.get_type_hints(func, include_extras=True)
        names = [field.name for field in fields]
        clash = sorted(set(names) & (set(signature.parameters) - {param}))
        if clash:
            raise TypeError(f"{func.__qualname__}: {cls.__name__} fields clash with {clash}")

        def keyword(name: str, default: Any, annotation: Any) -> inspect.Parameter:
            kind = inspect.Parameter.KEYWORD_ONLY
            return inspect.Parameter(name, kind, default=default, annotation=annotation)

        parameters: list[inspect.Parameter] = []
        for own in signature.parameters.values():
            if own.name != param:
                annotation = hints.get(own.name, own.annotation)
                parameters.append(keyword(own.name, own.default, annotation))
                continue
            for field in fields:
                if field.default is not dataclasses.MISSING:
                    default = field.default
                elif field.default_factory is not dataclasses.MISSING:
                    default = field.default_factory()
                else:
                    default = inspect.Parameter.empty
                parameters.append(keyword(field.name, default, field_hints[field.name]))

        @functools.wraps(func)
        def wrapper(**values: Any) -> Any:
            group = cls(**{name: values.pop(name) for name in names if name in values})
            return func(**values, **{param: group})

        returns = hints.get("return", signature.return_annotation)
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=parameters, return_annotation=returns
        )
        wrapper.__annotations__ = {
            **{p.name: p.annotation for p in parameters if p.annotation is not p.empty},
            **({"return": returns} if returns is not signature.empty else {}),
        }
        return typing.cast(F, wrapper)

    return decorate
