"""Terminal width, wrapping and tables that fit it (pure functions but `width()`; no dependencies).

A table is tried in three layouts, widest first, and the first that fits is printed:
1. boxed, with text columns wrapped inside their cells (headers wrap at spaces);
2. boxed without the free-text column ("why"), which moves under its row across the table;
3. one block per row: the first cell as a title, then "header: value" pairs wrapped to the width.
`width=None` (`--wide`) prints the full boxed table on one line per row, whatever its width.
"""
from __future__ import annotations

import argparse
import os
import re
import textwrap

DEFAULT_WIDTH = None  # no terminal behind stdout or stderr (a file, a test, a script): full lines, as --wide
_ANSI = re.compile(r"\033\[[0-9;]*m")


def width(wide: bool = False, streams: tuple | None = None) -> int | None:
    """Columns to fit: None under --wide; else $COLUMNS, else the terminal behind stdout or stderr (a pipe
    into `less` still has one on stderr), else None (nothing to fit: a file or another program reads it)."""
    import sys

    if wide:
        return None
    raw = os.environ.get("COLUMNS", "")
    if raw.isdigit() and int(raw) >= 20:
        return int(raw)
    for stream in streams or (sys.stdout, sys.stderr):
        try:
            return max(20, os.get_terminal_size(stream.fileno()).columns)
        except (AttributeError, OSError, ValueError):
            continue
    return DEFAULT_WIDTH


def args_width(args) -> int | None:
    """The width for a parsed command line (`--wide` when the command has it)."""
    return width(bool(getattr(args, "wide", False)))


def visible_len(text: str) -> int:
    return len(_ANSI.sub("", text))


def wrap(text: str, columns: int | None, indent: str = "", subsequent: str | None = None) -> list[str]:
    """`text` as lines of at most `columns` (None: one line), the first starting with `indent`."""
    rest = indent if subsequent is None else subsequent
    if columns is None or visible_len(indent + text) <= columns:
        return [indent + text]
    return textwrap.wrap(text, max(columns, len(rest) + 10), initial_indent=indent, subsequent_indent=rest,
                         break_on_hyphens=False) or [indent]


def paragraph(lines: list[str], columns: int | None, indent: str = "  ") -> list[str]:
    """Each line wrapped, its continuation lines indented under it."""
    out = []
    for line in lines:
        lead = line[: len(line) - len(line.lstrip())]
        out += wrap(line.lstrip(), columns, lead, lead + indent)
    return out


# --- tables -------------------------------------------------------------------------------------------------

def _cell_lines(text: str, columns: int) -> list[str]:
    if len(text) <= columns:
        return [text]
    return textwrap.wrap(text, columns, break_on_hyphens=False) or [""]


def _min_width(index: int, cells: list[tuple[str, ...]], align: str) -> int:
    natural = max(len(row[index]) for row in cells)
    header_word = max((len(word) for word in cells[0][index].split()), default=0)
    if align == "r":  # figures never wrap; their header may
        return max(max(len(row[index]) for row in cells[1:]) if len(cells) > 1 else 0, header_word)
    return min(natural, max(header_word, 10))


def _fit_widths(cells, aligns, columns: int | None, only: tuple[int, ...] | None = None,
                floor: int | None = None) -> list[int] | None:
    """Column widths that fit `columns` by wrapping text columns (the widest first), or None. `only`: the
    columns that may shrink; `floor`: their least width (default: their longest header word, 10 at least)."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(aligns))]
    if columns is None:
        return widths
    floors = [_min_width(i, cells, a) if floor is None else min(widths[i], floor) for i, a in enumerate(aligns)]
    excess = sum(widths) + 3 * len(widths) + 1 - columns
    while excess > 0:
        shrinkable = [i for i in range(len(widths)) if widths[i] > floors[i] and (only is None or i in only)]
        if not shrinkable:
            return None
        widest = max(shrinkable, key=lambda i: widths[i])
        step = min(excess, widths[widest] - floors[widest],
                   max(1, widths[widest] - max((widths[i] for i in shrinkable if i != widest), default=0)))
        widths[widest] -= step
        excess -= step
    return widths


def _boxed(cells, aligns, widths, under: list[str] | None = None, over: list[str] | None = None) -> list[str]:
    inner = sum(widths) + 3 * (len(widths) - 1)

    def span(text: str, first: str, rest: str) -> list[str]:
        return ["│ " + line.ljust(inner) + " │"
                for line in textwrap.wrap(text, inner, initial_indent=first, subsequent_indent=rest,
                                          break_on_hyphens=False)]

    def lines(row):
        parts = [_cell_lines(cell, w) for cell, w in zip(row, widths)]
        height = max(len(p) for p in parts)
        out = []
        for k in range(height):
            texts = [(p[k] if k < len(p) else "") for p in parts]
            out.append("│ " + " │ ".join(t.rjust(w) if a == "r" else t.ljust(w)
                                         for t, w, a in zip(texts, widths, aligns)) + " │")
        return out

    out = ["┌─" + "─┬─".join("─" * w for w in widths) + "─┐", *lines(cells[0]),
           "├─" + "─┼─".join("─" * w for w in widths) + "─┤"]
    for number, row in enumerate(cells[1:]):
        if over and over[number]:
            out += span(over[number], "", "  ")
        out += lines(row)
        note = under[number] if under else ""
        if note:
            out += span(note, "  ↳ ", "    ")
    return out + ["└─" + "─┴─".join("─" * w for w in widths) + "─┘"]


def _records(cells, columns: int) -> list[str]:
    headers = cells[0]
    out = []
    for row in cells[1:]:
        out += wrap(row[0] or "·", columns, "• ", "  ")
        pairs = [f"{header.strip() or 'value'}: {cell}" for header, cell in zip(headers[1:], row[1:]) if cell.strip()]
        if pairs:
            out += wrap(" · ".join(pairs), columns, "    ", "    ")
    return out


def table(headers: tuple, rows: list[tuple], aligns: str, columns: int | None = None, under: int | None = None,
          title_header: bool = True) -> list[str]:
    """Lines of a table that fits `columns` (None: natural widths). `under`: the index of the free-text column
    that may move under its row (default: the last column when it is left-aligned)."""
    cells = [tuple(str(c) for c in headers)] + [tuple(str(c) for c in row) for row in rows]
    if columns is None:
        return _boxed(cells, aligns, _fit_widths(cells, aligns, None))
    under = (len(aligns) - 1 if aligns[-1] == "l" and len(aligns) > 2 else None) if under is None else under
    if under is False:  # no free-text column: every column wraps in place
        under = None
    if under is not None:  # the "why" column wraps in place while it keeps 30 columns, else moves under
        widths = _fit_widths(cells, aligns, columns, only=(under,), floor=30)
        if widths is not None:
            return _boxed(cells, aligns, widths)
        kept = [i for i in range(len(aligns)) if i != under]
        slim = [tuple(row[i] for i in kept) for row in cells]
        slim_aligns = "".join(aligns[i] for i in kept)
        notes = [row[under] for row in cells[1:]]
        widths = _fit_widths(slim, slim_aligns, columns, only=tuple(range(1, len(kept))))
        if widths is not None and sum(widths) + 3 * len(widths) - 1 >= 30:
            return _boxed(slim, slim_aligns, widths, under=notes)
        if len(kept) > 2:  # the first cell as a line above its row, the figures in the box
            figures = [(row[0] if number else "",) + row[1:] for number, row in enumerate(slim)]
            figures = [row[1:] for row in figures]
            widths = _fit_widths(figures, slim_aligns[1:], columns)
            if widths is not None:
                return ([str(headers[0])] if title_header and str(headers[0]).strip() else []) + _boxed(
                    figures, slim_aligns[1:], widths, under=notes, over=[row[0] for row in slim[1:]])
    else:
        widths = _fit_widths(cells, aligns, columns)
        if widths is not None:
            return _boxed(cells, aligns, widths)
    title = [str(headers[0])] if title_header and str(headers[0]).strip() else []
    return title + _records(cells, columns)


def columns_text(rows: list[tuple], aligns: str, columns: int | None, indent: str = "  ",
                 header: tuple | None = None) -> list[str]:
    """A plain (unboxed) aligned listing. A first cell far longer than most gets its own line; the last
    column wraps under itself while it keeps 30 columns, else goes under its row."""
    cells = ([tuple(str(c) for c in header)] if header else []) + [tuple(str(c) for c in row) for row in rows]
    if not cells:
        return []
    widths = [max(len(row[i]) for row in cells) for i in range(len(aligns))]
    if columns is not None and len(cells) > 4:
        lengths = sorted(len(row[0]) for row in cells)
        widths[0] = min(widths[0], max(lengths[int(len(lengths) * 0.75)], len(cells[0][0])))
    lead = len(indent) + sum(w + 2 for w in widths[:-1])
    out = []
    for row in cells:
        first = row[0]
        if len(first) > widths[0]:
            out.append(indent + first)
            row = ("",) + row[1:]
        head = indent + "  ".join((c.rjust(w) if a == "r" else c.ljust(w))
                                  for c, w, a in zip(row[:-1], widths[:-1], aligns[:-1]))
        last = row[-1]
        if columns is None or lead + len(last) <= columns:
            out.append((head + "  " + last).rstrip())
        elif columns - lead >= 30:
            out += [line.rstrip() for line in wrap(last, columns, head + "  ", " " * lead)]
        else:
            out.append(head.rstrip())
            out += wrap(last, columns, indent + "    ", indent + "    ")
    return out


def help_lines(text: str, columns: int) -> list[str]:
    """A --help description or epilog fitted to `columns`: short lines as written; a long example command
    continued with ' \\' (as a shell reads it); a long prose line wrapped under its own indentation, and under
    its definition when it is a 'term   meaning' row (two or more spaces after the term)."""
    out: list[str] = []
    for line in text.splitlines():
        if len(line) <= columns:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        if line.lstrip().startswith("vram-detective "):
            out += continued_command(line, lead, columns)
            continue
        term = re.match(r"\s*\S+(?: \S+)*\s{2,}", line)
        under = " " * term.end() if term and term.end() < columns // 2 else lead
        out += textwrap.wrap(line, columns, initial_indent="", subsequent_indent=under, break_on_hyphens=False,
                             drop_whitespace=True) or [line]
    return out


def continued_command(line: str, lead: str, columns: int) -> list[str]:
    """A shell command over several lines: a flag kept with its value, a trailing comment on a line of its own
    when it does not fit."""
    command, _, comment = line.partition("  #")
    words = command.split()
    pieces: list[str] = []
    for word in words:  # '--flag value' stays together
        if pieces and pieces[-1].startswith("-") and " " not in pieces[-1] and not word.startswith("-"):
            pieces[-1] += " " + word
        else:
            pieces.append(word)
    lines, current = [], lead + pieces[0]
    for piece in pieces[1:]:
        if len(current) + 1 + len(piece) + 2 > columns:
            lines.append(current + " \\")
            current = f"{lead}    {piece}"
        else:
            current += " " + piece
    if comment and len(current) + 3 + len(comment.rstrip()) <= columns:
        current += "  #" + comment.rstrip()
    elif comment:
        lines.append(current)
        current = f"{lead}    #{comment.rstrip()}"
    return lines + [current]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help with descriptions and examples as written, fitted to the terminal (help_lines)."""

    def _fill_text(self, text, width, indent):
        fitted = "\n".join(indent + line for line in help_lines(text, max(width, 40)))
        return fitted + ("\n" if text.endswith("\n") else "")
