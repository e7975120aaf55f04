"""The one shape of a rule table, shared by every engine.

A row says: from release `since` on (on engine path `path` when the engine has several, e.g. vLLM's V0 and V1;
every path when None), rule `name` has `value`, as read from `source` (the file and the release it was read
in). A release's rules are the last row of each rule at or before it: a row ends (`until`) where the next row of
the same rule and path begins. Values are typed: `Rule[int]`, `Rule[str]`, `Rule[LogFormat]` ...

Versions are tuples of ints (vLLM (0, 8, 5), llama.cpp (5274,)); the release window each table models is a
`ReleaseWindow`, whose `check` is the only place a version is compared with the newest modelled release.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Iterable, TypeVar

T = TypeVar("T")
Version = tuple[int, ...]


@dataclass(frozen=True)
class Rule(Generic[T]):
    """From `since` on, rule `name` is `value` (read from `source`: file and release)."""

    since: Version
    name: str
    value: T
    source: str
    path: str | None = None  # the engine path this row is for; None: every path
    approximate: bool = False  # bracketed by the releases read, not pinned to the change itself


class UnmodelledReleaseError(ValueError):
    """A release outside the window the rule table models (bad input: exit 2)."""


@dataclass(frozen=True)
class ReleaseWindow:
    """The releases one engine's rule table models. `depth`: how many leading numbers name a release line
    (vLLM 2: 0.33.x is 0.33's rules; SGLang 3; llama.cpp 1, a build number)."""

    engine: str  # how people write it: "vLLM"
    oldest: Version
    newest: Version
    depth: int
    label: Callable[[Version], str]  # (0, 33, 0) -> "0.33.0"; (7342,) -> "b7342"

    def check(self, version: Version, text: str | None = None) -> Version:
        """`version` when the table models it; UnmodelledReleaseError naming the window otherwise."""
        said = text if text is not None else self.label(version)
        if tuple(version) < tuple(self.oldest):
            raise UnmodelledReleaseError(
                f"{self.engine} {said} is older than the oldest modelled release ({self.label(self.oldest)})")
        if tuple(version)[:self.depth] > tuple(self.newest)[:self.depth]:
            # a later release's rules are not read yet: predicting it with the newest ones would be a guess
            raise UnmodelledReleaseError(
                f"{self.engine} {said} is newer than the newest modelled release ({self.label(self.newest)}); "
                f"modelled: {self.label(self.oldest)} to {self.label(self.newest)}")
        return tuple(version)

    def contains(self, version: Version) -> bool:
        try:
            self.check(version)
        except UnmodelledReleaseError:
            return False
        return True


def rows_in_force(rows: Iterable[Rule[T]], version: Version, path: str | None = None) -> dict[str, Rule[T]]:
    """Each rule's row at `version` on `path` (rows for every path, and for `path` itself): name -> row."""
    found: dict[str, Rule[T]] = {}
    for row in sorted(rows, key=lambda row: tuple(row.since)):
        if tuple(row.since) <= tuple(version) and row.path in (None, path):
            found[row.name] = row
    return found


def until(rows: Iterable[Rule[T]], row: Rule[T]) -> Version | None:
    """The release where `row` stops holding on its path (the next row of the same rule that reaches that path);
    None while it still holds in the newest release."""
    later = [other.since for other in rows if other.name == row.name and tuple(other.since) > tuple(row.since)
             and (other.path is None or row.path is None or other.path == row.path)]
    return min(later, default=None)
