"""The one shape of a rule table, shared by every engine.

A row says: from release `since` on (on engine path `path` when the engine has several, e.g. vLLM's V0 and V1;
every path when None), rule `rule` has `value`, as read from `source` (the file and the release it was read in).
A release's rules are the last row of each rule at or before it: a row holds `until` the next row of the same
rule that reaches its path. Values are typed: `Rule[int]`, `Rule[str]`, `Rule[LogFormat]` ...

Versions are tuples of ints (vLLM (0, 8, 5), llama.cpp (5274,)); the window of releases a table models is a
`ReleaseWindow`, whose `check` is where a requested release meets the oldest and newest modelled ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Iterable, TypeVar

T = TypeVar("T")
Version = tuple[int, ...]


@dataclass(frozen=True)
class Rule(Generic[T]):
    """From `since` on, rule `rule` is `value`, as read from `source` (file and release)."""

    since: Version
    rule: str
    value: T
    source: str
    approximate: bool = False  # bracketed by the releases read, not pinned to the change itself
    path: str | None = None  # the engine path this row is for (vLLM's "v0" / "v1"); None: every path


class UnsupportedReleaseError(ValueError):
    """A release outside the window the rule table models (bad input: exit 2)."""


@dataclass(frozen=True)
class ReleaseWindow:
    """The releases one engine's rule table models. `depth`: how many leading numbers name a release line
    (vLLM 2: 0.33.x is read with 0.33's rules; llama.cpp 1, a build number)."""

    engine: str  # how people write it: "vLLM"
    oldest: Version
    newest: Version
    depth: int
    label: Callable[[Version], str]  # (0, 33, 0) -> "0.33.0"; (7342,) -> "b7342"

    def check(self, version: Version, text: str | None = None) -> Version:
        """`version` when the table models it; UnsupportedReleaseError naming the window otherwise."""
        said = text if text is not None else self.label(version)
        if tuple(version) < tuple(self.oldest):
            raise UnsupportedReleaseError(
                f"{self.engine} {said} is older than the oldest modelled release ({self.label(self.oldest)})")
        if tuple(version)[:self.depth] > tuple(self.newest)[:self.depth]:
            # a later release's rules are not read yet: predicting it with the newest ones would be a guess
            raise UnsupportedReleaseError(f"{self.engine} {said} is newer than the newest modelled release "
                                          f"(known releases: {self.label(self.oldest)} to {self.newest_line})")
        return tuple(version)

    @property
    def newest_line(self) -> str:
        """The newest release as the window reads it: "0.33.x" when patch releases share a line's rules."""
        if self.depth >= len(self.newest):
            return self.label(self.newest)
        return ".".join(str(part) for part in self.newest[:self.depth]) + ".x"

    def contains(self, version: Version) -> bool:
        try:
            self.check(version)
        except UnsupportedReleaseError:
            return False
        return True


def rows_in_force(rows: Iterable[Rule[T]], version: Version, path: str | None = None) -> dict[str, Rule[T]]:
    """Each rule's row at `version` on `path` (rows for every path, and for `path` itself): rule -> row."""
    found: dict[str, Rule[T]] = {}
    for row in sorted(rows, key=lambda row: tuple(row.since)):
        if tuple(row.since) <= tuple(version) and row.path in (None, path):
            found[row.rule] = row
    return found


def value_at(rows: Iterable[Rule[T]], rule: str, version: Version | None, path: str | None = None) -> T:
    """One rule's value at `version` (None: the newest row); KeyError for a rule without rows."""
    mine = [row for row in rows if row.rule == rule and row.path in (None, path)]
    if not mine:
        raise KeyError(rule)
    if version is not None:
        mine = [row for row in mine if tuple(row.since) <= tuple(version)]
        if not mine:
            raise KeyError(rule)
    return max(mine, key=lambda row: tuple(row.since)).value  # max keeps the first of equal releases


def rule_names(rows: Iterable[Rule]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(row.rule for row in rows))


def changes(rows: Iterable[Rule]) -> tuple[Version, ...]:
    """The releases at which some rule changes, oldest first."""
    return tuple(sorted({tuple(row.since) for row in rows}))


def until(rows: Iterable[Rule[T]], row: Rule[T]) -> Version | None:
    """The release where `row` stops holding on its path (the next row of the same rule that reaches that path);
    None while it still holds at the newest release."""
    later = [other.since for other in rows if other.rule == row.rule and tuple(other.since) > tuple(row.since)
             and (other.path is None or other.path == row.path)]
    return min(later, default=None)
