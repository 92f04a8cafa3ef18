"""What the apps print, made readable at the console's width (80 columns in a log or a pipe) and kept
in the job log.

`app_console()`'s render hook (`FitToWidth`) changes only what would not fit: a table wider than the
console becomes one record per row (the first cell, then `header: value` items packed at the width); a
text is wrapped at spaces, a word longer than the line (a path) and a command to copy (`memtrace ...`,
`mlflow ...`) never broken. Every printed block also goes, as plain text, to the log files through the
logger `memtrace.console` (records marked `ECHO_ATTR`, kept off the console by `setup_logging`).
`markdown_blocks` splits Markdown into prose and its pipe tables (rich tables, fitted too).
"""

from __future__ import annotations

import io
import logging
import re
import textwrap
from collections.abc import Iterable

from rich.console import Console, ConsoleRenderable, RenderableType, RenderHook
from rich.constrain import Constrain
from rich.control import Control
from rich.markdown import Markdown
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

ECHO_ATTR = "memtrace_console_echo"  # set on the log records that copy console output into the log files
INDENT = "    "  # the continuation of a record's items
NO_CROP = 1000  # the apps' console width: wide enough that nothing laid out by `FitToWidth` is cropped

echo_logger = logging.getLogger("memtrace.console")


def app_console(echo: bool = True) -> Console:
    """The console an app prints with, fitted to the terminal's width (else `COLUMNS`, else 80) and echoed
    to the log files (unless `echo` is false: after a sweep, the open log file is the last job's)."""
    width = Console().width  # the terminal's width, else COLUMNS, else 80
    console = Console(width=NO_CROP)  # the hook lays everything out at `width`; nothing is cropped after it
    console.push_render_hook(FitToWidth(width, echo))
    return console


def is_echo(record: logging.LogRecord) -> bool:
    return bool(getattr(record, ECHO_ATTR, False))


class FitToWidth(RenderHook):
    """A rich render hook: lays out what is printed at `width` columns and echoes it to the log files."""

    def __init__(self, width: int, echo: bool = True) -> None:
        self.width = width
        self.echo = echo

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        fitted = [r if _is_control(r) else fit(r, self.width) for r in renderables]
        printable = [r for r in fitted if not _is_control(r)]
        if printable and self.echo:
            text = plain_text(printable)
            if text.strip():
                echo_logger.info("%s", text.rstrip("\n"), extra={ECHO_ATTR: True})
        return fitted


def _is_control(renderable: object) -> bool:
    return isinstance(renderable, Control | Segment)


def natural_width(renderable: Table) -> int:
    """The width `renderable` takes when nothing limits it."""
    measuring = Console(width=NO_CROP, file=io.StringIO())
    return measuring.measure(renderable).maximum


def fit(renderable: ConsoleRenderable, width: int) -> ConsoleRenderable:
    """`renderable` laid out at `width` (the module doc); anything else rendered at most `width` wide."""
    if isinstance(renderable, Table) and renderable.box is not None and natural_width(renderable) > width:
        return table_as_records(renderable, width)
    if isinstance(renderable, Text):
        return renderable if renderable.no_wrap else wrap_words(renderable, width)
    return Constrain(renderable, width)


# a command to copy, to the end of its line; its program may be a path (`.venv/bin/memtrace`: command_line.program)
COMMAND = re.compile(r"(?:^|(?<=\s))(?:[^\s]*/)?(?:memtrace|mlflow) [a-z].*$")


def wrap_words(text: Text, width: int) -> Text:
    """`text` (styles kept) broken at spaces into lines of at most `width` columns, a long word and a
    command to copy kept whole; returned unwrappable, so the console prints it as is."""
    lines: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        plain = line.plain
        command = COMMAND.search(plain)
        unbreakable = command.start() if command else len(plain)
        offsets: list[int] = []
        start = 0
        for match in re.finditer(r"\S+", plain):
            end = len(plain.rstrip()) if match.start() >= unbreakable else match.end()
            if end - start > width and match.start() > start:
                offsets.append(match.start())
                start = match.start()
            if match.start() >= unbreakable:
                break
        for part in line.divide(offsets):
            part.rstrip()
            lines.append(part)
    wrapped = Text("\n", style=text.style).join(lines)
    wrapped.no_wrap, wrapped.overflow, wrapped.end = True, "ignore", text.end
    return wrapped


def _cell_text(cell: RenderableType) -> str:
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return str(cell)


def _header(column_header: RenderableType) -> str:
    return " ".join(_cell_text(column_header).split())


def table_rows(table: Table) -> tuple[list[str], list[list[str]]]:
    """The headers and the rows of `table` as plain strings (a cell's line breaks as spaces)."""
    headers = [_header(column.header) for column in table.columns]
    cells = [[" ".join(_cell_text(cell).split()) for cell in column.cells] for column in table.columns]
    rows = [[column[i] if i < len(column) else "" for column in cells] for i in range(table.row_count)]
    return headers, rows


def pack(items: Iterable[str], width: int, indent: str = INDENT, separator: str = "; ") -> list[str]:
    """Items joined by `separator` into lines of at most `width` columns, each starting with `indent`; an
    item is split (at spaces) only when it is longer than a whole line."""
    lines: list[str] = []
    current = ""
    room = width - len(indent)
    for item in items:
        candidate = f"{current}{separator}{item}" if current else item
        if len(indent) + len(candidate) + len(separator.rstrip()) <= width:
            current = candidate
            continue
        if current:
            lines.append(current + separator.rstrip())
        if len(item) <= room:
            current = item
            continue
        parts = textwrap.wrap(item, room, break_long_words=False, break_on_hyphens=False) or [item]
        lines.extend(parts[:-1])
        current = parts[-1]
    if current:
        lines.append(current)
    return [indent + line for line in lines]


def table_as_records(table: Table, width: int) -> Text:
    """A table too wide for `width` as one record per row: the first cell, then `header: value` items."""
    headers, rows = table_rows(table)
    lines: list[str] = []
    if table.title is not None:
        lines.extend(textwrap.wrap(_cell_text(table.title), width, break_long_words=False) or [""])
    for row in rows:
        label = f"{headers[0]} {row[0]}".strip() if headers and headers[0] else row[0]
        lines.append(label)
        lines.extend(pack((f"{h}: {v}" for h, v in zip(headers[1:], row[1:], strict=True) if v), width))
    return Text("\n".join(lines), no_wrap=True, overflow="ignore")


def plain_text(renderables: Iterable[RenderableType]) -> str:
    """What fitted `renderables` print, without colour or markup (for the log files)."""
    buffer = io.StringIO()
    plain = Console(file=buffer, width=NO_CROP, color_system=None, force_terminal=False, no_color=True,
                    highlight=False, legacy_windows=False, force_jupyter=False)
    for renderable in renderables:
        plain.print(renderable)
    return buffer.getvalue()


_TABLE_LINE = re.compile(r"^\s*\|.*\|\s*$")
_RULE_CELL = re.compile(r"^:?-{3,}:?$")


def _split_row(line: str) -> list[str]:
    return [cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")]


def markdown_table(lines: list[str]) -> Table:
    """A Markdown pipe table (header, rule, rows; bold markers dropped) as a rich table."""
    headers = _split_row(lines[0])
    table = Table()
    for header in headers:
        table.add_column(header, overflow="fold")
    for line in lines[1:]:
        cells = _split_row(line)
        if all(_RULE_CELL.match(cell) for cell in cells if cell):
            continue
        table.add_row(*(cells + [""] * (len(headers) - len(cells)))[: len(headers)])
    return table


def markdown_blocks(markdown: str) -> list[RenderableType]:
    """Markdown as printable blocks: its prose as `Markdown`, each pipe table as a rich `Table`."""
    blocks: list[RenderableType] = []
    prose: list[str] = []
    table: list[str] = []

    def flush_prose() -> None:
        if "".join(prose).strip():
            blocks.append(Markdown("\n".join(prose)))
        prose.clear()

    for line in markdown.splitlines():
        if _TABLE_LINE.match(line):
            if not table:
                flush_prose()
            table.append(line)
            continue
        if table:
            blocks.append(markdown_table(table))
            table.clear()
        prose.append(line)
    if table:
        blocks.append(markdown_table(table))
    flush_prose()
    return blocks
