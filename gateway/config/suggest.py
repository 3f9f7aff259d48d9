"""The key a mistyped one most likely meant: `upstrem` under a route is `upstream`.

Pydantic reports an unknown key by its path alone; the keys valid there are read from the
settings models by walking the same path, so a suggestion never names a key that would be
refused in its turn.
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

#: Longer than any valid key by far: not a typo, and not worth comparing.
_LONGEST_KEY = 64


def nearest_key(root: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The valid key closest to the unknown one at `loc` (the key is its last part), or None
    when none is close enough to be worth saying."""
    if not loc or not isinstance(loc[-1], str) or len(loc[-1]) > _LONGEST_KEY:
        return None
    found = difflib.get_close_matches(loc[-1], _keys_at(root, loc[:-1]), n=1, cutoff=0.7)
    return found[0] if found else None


def _keys_at(root: type[BaseModel], path: tuple[int | str, ...]) -> list[str]:
    keys: set[str] = set()
    for model in _models_at(root, path):
        for name, field in model.model_fields.items():
            keys.add(field.alias or name)
    return sorted(keys)


def _models_at(annotation: Any, path: tuple[int | str, ...]) -> list[type[BaseModel]]:
    """Every settings model the value at `path` may be (a union offers several)."""
    models = _models_in(annotation)
    if not path:
        return models
    head, rest = path[0], path[1:]
    if isinstance(head, int):  # an item of a list or tuple of models
        return [m for item in _items_of(annotation) for m in _models_at(item, rest)]
    found: list[type[BaseModel]] = []
    for model in models:
        field = model.model_fields.get(head) or next(
            (f for f in model.model_fields.values() if f.alias == head), None
        )
        if field is not None:
            found += _models_at(field.annotation, rest)
    return found


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    annotation = _bare(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _models_in(arg)]
    return []


def _items_of(annotation: Any) -> list[Any]:
    annotation = _bare(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return [item for arg in get_args(annotation) for item in _items_of(arg)]
    if get_origin(annotation) in (tuple, list):
        return [arg for arg in get_args(annotation) if arg is not Ellipsis]
    return []


def _bare(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation
