"""Mutations that turn a copy of a real fixture file into a broken one, for the robustness tests."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import perfkit


def copy_run(src: Path, dst: Path) -> Path:
    """A private, writable copy of a fixture run folder (fixtures are never edited, may be read-only)."""
    shutil.copytree(src, dst, symlinks=True)
    for path in dst.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def load_broken(source: Path, folder: Path, name: str, content: bytes) -> tuple[perfkit.Run, list[str]]:
    """A copy of run folder `source` at `folder` whose file `name` holds `content`, loaded: the run and its
    warnings that name the file."""
    copy_run(source, folder)
    (folder / name).write_bytes(content)
    run = perfkit.load(folder)
    return run, [warning for warning in run.warnings if name in warning]


def folder_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 (or link target) of everything under root, to prove a reader wrote nothing."""
    digest = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            digest[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            try:
                digest[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            except PermissionError:
                digest[rel] = "unreadable"
        else:
            digest[rel] = "dir"
    return digest


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def empty(path: Path) -> None:
    path.write_bytes(b"")


def header_only(path: Path) -> None:
    path.write_bytes(lines(path)[0])


def cut_mid_line(path: Path) -> None:
    """Keep the header and first data row, then half of the second row: a profiler killed mid-write."""
    rows = lines(path)
    path.write_bytes(b"".join(rows[:2]) + rows[2][: len(rows[2]) // 2])


def cut_in_half(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def semicolons(path: Path) -> None:
    path.write_bytes(path.read_bytes().replace(b",", b";"))


def non_utf8(path: Path) -> None:
    rows = lines(path)
    rows.insert(1 if len(rows) > 1 else 0, b"\xff\xfe\xc3\x28 bad bytes\n")
    path.write_bytes(b"".join(rows))


CSV_BREAKS = ["empty", "header_only", "truncated_row", "unknown_columns", "not_utf8"]


def broken_csv(original: bytes, how: str, cut_at: int, bad_cell: int = 0) -> bytes:
    """A CSV file's bytes broken `how` (one of CSV_BREAKS): emptied, its header alone, its first data row cut to
    `cut_at` bytes appended (a write cut off in the middle of the last row), columns no reader knows, or bytes no
    UTF-8 text has at the start of cell `bad_cell` of the first data row (a cell the reader uses)."""
    header, _, body = original.partition(b"\n")
    if how == "empty":
        return b""
    if how == "header_only":
        return header + b"\n"
    if how == "truncated_row":
        return original.rstrip(b"\r\n") + b"\n" + body.split(b"\n")[0][:cut_at]
    if how == "unknown_columns":
        return b"alpha,beta,gamma\n1,2,3\n"
    assert how == "not_utf8"
    *before, rest = body.split(b",", bad_cell)
    return header + b"\n" + b"".join(cell + b"," for cell in before) + b"\xff\xfe" + rest


def set_column(path: Path, column: str, value: str, row: int = 1) -> None:
    """Replace one cell of data row `row` (1 = first after the header) in a comma-separated file."""
    rows = [r.decode() for r in lines(path)]
    header = rows[0].rstrip("\r\n").split(",")
    cells = rows[row].rstrip("\r\n").split(",")
    cells[header.index(column)] = value
    rows[row] = ",".join(cells) + "\n"
    path.write_text("".join(rows))


def duplicate_rows(path: Path) -> None:
    rows = lines(path)
    path.write_bytes(b"".join(rows[:1] + rows[1:] + rows[1:]))


def reverse_rows(path: Path) -> None:
    """The data rows last to first: timestamps out of order."""
    rows = lines(path)
    data = [row if row.endswith(b"\n") else row + b"\n" for row in rows[1:]]
    path.write_bytes(b"".join(rows[:1] + data[::-1]))


def replace_bytes(path: Path, old: bytes, new: bytes) -> None:
    raw = path.read_bytes()
    assert old in raw, f"{old!r} not in {path.name}"
    path.write_bytes(raw.replace(old, new))


def keep_rows(path: Path, predicate) -> None:
    rows = lines(path)
    path.write_bytes(b"".join(rows[:1] + [r for r in rows[1:] if predicate(r)]))


def extra_columns(path: Path) -> None:
    rows = [r.rstrip(b"\r\n") for r in lines(path)]
    out = [rows[0] + b",Mystery Column,another_one\n"] + [r + b",42,x\n" for r in rows[1:]]
    path.write_bytes(b"".join(out))


def reverse_columns(path: Path) -> None:
    import csv
    import io
    table = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([row[::-1] for row in table])
    path.write_text(buf.getvalue())


def huge_line(path: Path, size: int = 20 * 1024 * 1024) -> None:
    path.write_bytes(b"x" * size)


def symlink_loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)


def not_sqlite(path: Path) -> None:
    """A file with a database's name holding text (a copy gone wrong, a download's error page)."""
    path.write_bytes(b"<html><body>502 Bad Gateway</body></html>\n")


def _edit_database(path: Path, *statements: str) -> None:
    import sqlite3
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode=DELETE")  # the fixture copy is in WAL mode: leave no -wal behind
        for statement in statements:
            connection.execute(statement)
        connection.commit()
    finally:
        connection.close()  # also after a statement SQLite refused: the next edit must find the file unlocked


def drop_table(path: Path, table: str) -> None:
    _edit_database(path, f'DROP TABLE "{table}"')


def rename_column(path: Path, table: str, old: str, new: str) -> None:
    """A schema version perfkit does not know: a column under another name."""
    _edit_database(path, f'ALTER TABLE "{table}" RENAME COLUMN "{old}" TO "{new}"')


def fifo(path: Path) -> None:
    """A named pipe in place of the file: opening it for reading waits for a writer that never comes."""
    path.unlink()
    os.mkfifo(path)


def nested(opening: bytes, depth: int) -> bytes:
    """A JSON value `depth` levels deep: arrays (`[`) or objects (`{`) inside each other."""
    if opening == b"[":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def set_cells(path: Path, table: str, assignments: str, where: str = "1") -> None:
    """UPDATE `table` SET `assignments` WHERE `where` in a copy of a profiler database."""
    _edit_database(path, f'UPDATE "{table}" SET {assignments} WHERE {where}')


def replace_once(path: Path, old: bytes, new: bytes) -> None:
    """Replace the first `old` only (a trace repeats its keys in every event)."""
    raw = path.read_bytes()
    assert old in raw, f"{old!r} not in {path.name}"
    path.write_bytes(raw.replace(old, new, 1))
