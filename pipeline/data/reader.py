"""Benchmark records read through Hugging Face `datasets`: a local JSON / JSON Lines file or a hub dataset.

Every column is read as `datasets.Json()`, undecoded, and decoded here, so records come back exactly as
written (no schema merging or coercion; a top-level scalar comes back as its text); a file with unknown
top-level keys is read again with them. Every problem is a `DataError` naming the file. No parsing into our
records, no network of its own, no printing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A data file (or in-memory source) is missing, unreadable or has a wrong record."""

    def __init__(self, source: str, problem: str, record: str | None = None, field: str | None = None):
        self.source = source
        self.record = record
        self.field = field
        self.problem = problem
        parts = [source]
        if record:
            parts.append(record)
        if field:
            parts.append(f"field '{field}'")
        parts.append(problem)
        super().__init__(": ".join(parts))


JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}


def _json_type(value: object) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _cast_columns(error: BaseException) -> list[str] | None:
    """The file's column names when `error` (or one of its causes) is `datasets`' column-mismatch error."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = getattr(current, "table_column_names", None)
        if isinstance(names, list):
            return [str(name) for name in names]
        current = current.__cause__ or current.__context__
    return None


def _value(raw: str) -> Any:
    """A top-level value as stored by `Json()`: objects, lists and quoted strings decoded; anything else
    (the text of a string that is itself valid JSON, such as "12" or "8e5", or of a number) kept as text."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict | list | str) else raw


def _load_rows(source: str, columns: Sequence[str], load_args: dict[str, Any]) -> list[dict[str, Any]]:
    """`datasets.load_dataset(**load_args)`, every column as `Json()`, as plain dicts (see the module doc)."""
    import datasets

    wanted = list(dict.fromkeys(columns))
    for _attempt in range(2):
        features = datasets.Features({column: datasets.Json(decode=False) for column in wanted})
        try:
            rows = datasets.load_dataset(**load_args, features=features)
        except Exception as error:  # datasets raises many types (file not found, parse, cast, connection)
            found = _cast_columns(error)
            if found is not None and not set(found) <= set(wanted):
                wanted += [column for column in found if column not in wanted]
                continue
            raise
        if not isinstance(rows, datasets.Dataset):
            raise DataError(source, f"expected one split of records, got {type(rows).__name__}")
        # a column a record lacks comes back as None: dropped, so the parser reports the field as missing
        return [{key: _value(raw) for key, raw in row.items() if raw is not None} for row in rows]
    raise DataError(source, f"the columns kept changing while reading ({', '.join(wanted)})")


def _diagnose_local(path: Path, what: str, error: BaseException) -> DataError:
    """The `DataError` for a local file `datasets` could not load: the JSON problem when there is one."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as read_error:
        return DataError(source, f"cannot read file ({read_error.__class__.__name__}: {read_error})")
    documents = (
        [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
        if path.suffix.lower() in JSON_LINES_SUFFIXES else [(0, text)]
    )
    for offset, document in documents:
        try:
            json.loads(document)
        except json.JSONDecodeError as json_error:
            line = offset or json_error.lineno
            return DataError(source, f"invalid JSON at line {line} column {json_error.colno}: {json_error.msg}")
    return DataError(source, f"cannot load the {what} ({error.__class__.__name__}: {error})")


def read_file_rows(path: str | Path, columns: Sequence[str], what: str = "records") -> list[dict[str, Any]]:
    """The records of a local JSON list (or JSON Lines) file; `what` names them in messages ("samples")."""
    path = Path(path)
    source = str(path)
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).lstrip()
    except OSError as error:
        raise DataError(source, f"cannot read file ({error.__class__.__name__}: {error})") from error
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:].lstrip()
    json_lines = path.suffix.lower() in JSON_LINES_SUFFIXES
    if not json_lines and not head.startswith(b"["):
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise _diagnose_local(path, what, error) from error
        raise DataError(source, f"expected a JSON list of {what}, got {_json_type(value)}")
    if not head.strip(b"[ \t\r\n]"):  # `[]` or an empty JSON Lines file: no records (datasets refuses it)
        return []
    try:
        return _load_rows(source, columns, {"path": "json", "data_files": str(path.resolve()), "split": "train"})
    except DataError:
        raise
    except Exception as error:
        malformed = _non_record_list(path)
        if malformed is not None:  # a valid list with a non-object entry: the parser names that record
            return malformed
        raise _diagnose_local(path, what, error) from error


def _non_record_list(path: Path) -> list[Any] | None:
    """The decoded list of a JSON file when it is a list with an entry that is not an object (which
    `datasets` cannot read as a record), else None."""
    if path.suffix.lower() in JSON_LINES_SUFFIXES:
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if isinstance(value, list) and any(not isinstance(item, dict) for item in value):
        return value
    return None


def hub_source(name: str, data_files: str | Sequence[str] | None = None) -> str:
    """How a hub dataset is named in messages and as a run's data source: `hf:<name>[/<file>]`."""
    if data_files is None:
        return f"hf:{name}"
    files = [data_files] if isinstance(data_files, str) else list(data_files)
    return f"hf:{name}/{','.join(files)}"


def read_hub_rows(
    name: str, columns: Sequence[str], data_files: str | Sequence[str] | None = None, split: str = "train",
    revision: str | None = None,
) -> list[dict[str, Any]]:
    """The records of hub dataset `name` (or a local folder laid out like one) through `datasets.load_dataset`."""
    source = hub_source(name, data_files)
    files = data_files if data_files is None or isinstance(data_files, str) else list(data_files)
    args: dict[str, Any] = {"path": name, "data_files": files, "split": split, "revision": revision}
    try:
        return _load_rows(source, columns, args)
    except DataError:
        raise
    except Exception as error:
        raise DataError(source, f"cannot load from the hub ({error.__class__.__name__}: {error})") from error
