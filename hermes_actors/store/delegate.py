"""A facade's method that is one of its part's methods (:class:`delegate`), typed as that method: the store's
:class:`~hermes_actors.store.directory.Directory` and :class:`~hermes_actors.store.sql_store.SqlStore` answer most
of :class:`~hermes_actors.store.interface.StoreInterface` this way, so each signature is written once, on the part."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["delegate"]

P = ParamSpec("P")
R = TypeVar("R")


class delegate(Generic[P, R]):
    """``name = delegate("part", Part.method)`` in a class body: ``obj.name(...)`` is ``obj.part.method(...)``,
    with ``Part.method``'s signature and docstring; ``Facade.name(obj, ...)`` works as for a method."""

    __slots__ = ("_attr", "_name", "_unbound")

    def __init__(self, attr: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self._attr = attr
        self._name = name = method.__name__

        def unbound(facade: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            part_method: Callable[P, R] = getattr(getattr(facade, attr), name)
            return part_method(*args, **kwargs)

        unbound.__doc__ = method.__doc__
        self._unbound = unbound

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Callable[Concatenate[Any, P], R]: ...

    @overload
    def __get__(self, obj: object, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type[Any]) -> Callable[Concatenate[Any, P], R] | Callable[P, R]:
        if obj is None:
            return self._unbound
        method: Callable[P, R] = getattr(getattr(obj, self._attr), self._name)
        return method
