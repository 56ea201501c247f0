"""The ``file`` toolset: read, write, patch and list files inside the job's working directory.

They act on the host's copy of that directory — in a job with a container, the
same directory its commands see at ``/workspace`` (the mount point; such paths
are accepted too).

Every path is taken relative to ``ctx.cwd`` and resolved (symbolic links
followed, ``..`` collapsed) before use; a path that resolves outside the working
directory is refused, whether it was written as ``../x``, as an absolute path
elsewhere, or reaches out through a symlink (a job's file tools
stay inside its working directory).  Files larger than ``max_file_bytes`` are refused for reading and
writing.  Text is UTF-8; undecodable bytes are replaced when reading.

Listing walks the tree without following symlinked directories, so a link to
``/`` cannot turn ``list_files`` into a walk of the whole machine.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from child.tools import Tool, ToolContext, ToolError, cap_text, schema

MAX_LIST_ENTRIES = 1000
"""``list_files`` stops after this many entries (and says so)."""


def resolve(ctx: ToolContext, path: str) -> Path:
    """The absolute, symlink-free form of ``path`` (relative to ``ctx.cwd``; in a job
    with a container, a path under its mount point names the same file in ``ctx.cwd``).

    Raises :class:`ToolError` when ``path`` is empty or resolves outside ``ctx.cwd``.
    """
    if not path or not path.strip():
        raise ToolError("path is empty")
    if ctx.container is not None:
        path = ctx.container.host_path(path)
    root = Path(ctx.cwd).resolve()
    target = (root / Path(path).expanduser()).resolve()
    if target != root and root not in target.parents:
        raise ToolError(f"path {path!r} resolves to {target}, outside the working directory {root}; "
                        "file tools only reach files inside it")
    return target


def _relative(ctx: ToolContext, target: Path) -> str:
    rel = target.relative_to(Path(ctx.cwd).resolve()).as_posix()
    return "." if rel == "." else rel


def _check_size(what: str, path: str, size: int, ctx: ToolContext) -> None:
    limit = int(ctx.limits["max_file_bytes"])
    if size > limit:
        raise ToolError(f"{what} {path!r}: {size} bytes is larger than the limit of {limit} bytes (max_file_bytes)")


def _read_text(ctx: ToolContext, path: str) -> tuple[Path, str]:
    """Resolve ``path`` and return it with its text; raises :class:`ToolError`
    for a missing file, a directory, a binary file or one over the size cap."""
    target = resolve(ctx, path)
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory; use list_files")
    try:
        _check_size("file", path, target.stat().st_size, ctx)
        data = target.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"file {path!r} does not exist") from None
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if b"\0" in data[:8192]:
        raise ToolError(f"{path!r} looks like a binary file (it contains NUL bytes); not shown")
    return target, data.decode("utf-8", "replace")


def _write_text(ctx: ToolContext, path: str, target: Path, text: str) -> int:
    """Write ``text`` to ``target`` (parents created); returns the byte count."""
    data = text.encode("utf-8")
    _check_size("content for", path, len(data), ctx)
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    except OSError as exc:
        raise ToolError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    return len(data)


def read_file(args: dict, ctx: ToolContext) -> str:
    """Handler of ``read_file``: ``{"path", "offset"?: first line (1-based), "limit"?: lines}``
    → the text of those lines; a note ``[lines A-B of N]`` follows a partial read."""
    _, text = _read_text(ctx, args["path"])
    lines = text.splitlines(keepends=True)
    offset = int(args.get("offset", 1))
    limit = args.get("limit")
    end = len(lines) if limit is None else min(len(lines), offset - 1 + int(limit))
    if offset > max(len(lines), 1):
        raise ToolError(f"offset {offset} is past the end of {args['path']!r} ({len(lines)} lines)")
    chosen = "".join(lines[offset - 1:end])
    if offset > 1 or end < len(lines):
        chosen += f"\n[lines {offset}-{end} of {len(lines)}]"
    return cap_text(chosen, int(ctx.limits["max_output_bytes"]))


def write_file(args: dict, ctx: ToolContext) -> str:
    """Handler of ``write_file``: ``{"path", "content"}`` → a one-line confirmation.
    Creates missing parent directories; replaces an existing file."""
    target = resolve(ctx, args["path"])
    size = _write_text(ctx, args["path"], target, args["content"])
    return f"wrote {size} bytes to {_relative(ctx, target)}"


def patch_file(args: dict, ctx: ToolContext) -> str:
    """Handler of ``patch_file``: ``{"path", "old", "new"}`` replaces the one
    occurrence of ``old`` by ``new``.  Raises :class:`ToolError` when ``old``
    occurs zero times or more than once."""
    path, old, new = args["path"], args["old"], args["new"]
    target, text = _read_text(ctx, path)
    count = text.count(old)
    if count == 0:
        raise ToolError(f"the old text was not found in {path!r}; read the file and copy "
                        "the text exactly, including whitespace")
    if count > 1:
        raise ToolError(f"the old text occurs {count} times in {path!r}; include more "
                        "surrounding lines so it matches exactly once")
    start = text.index(old)
    _write_text(ctx, path, target, text[:start] + new + text[start + len(old):])
    first = text.count("\n", 0, start) + 1
    return f"patched {_relative(ctx, target)}: replaced lines {first}-{first + old.count(chr(10))}"


def _walk(base: Path):
    """Yield every path below ``base``, directories first, not following symlinked directories."""
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        here = Path(dirpath)
        for name in dirnames:
            yield here / name
        for name in sorted(filenames):
            yield here / name


def list_files(args: dict, ctx: ToolContext) -> str:
    """Handler of ``list_files``: ``{"path"?: directory (default "."), "glob"?: pattern}``
    → one path per line, relative to the working directory, directories ending in ``/``.

    Without ``glob`` the directory's own entries are listed; with it, the whole
    tree below is searched and each path is matched from the right
    (:meth:`pathlib.PurePath.match`: ``*.py`` matches at any depth, ``tests/*.py`` in any
    ``tests`` directory).  At most :data:`MAX_LIST_ENTRIES` entries.
    """
    base = resolve(ctx, args.get("path") or ".")
    if not base.is_dir():
        raise ToolError(f"{args.get('path')!r} is not a directory" if base.exists()
                        else f"directory {args.get('path')!r} does not exist")
    pattern = args.get("glob")
    root = Path(ctx.cwd).resolve()
    if pattern:
        candidates = (p for p in _walk(base) if PurePosixPath(p.relative_to(root).as_posix()).match(pattern))
    else:
        candidates = iter(sorted(base.iterdir()))
    entries: list[str] = []
    for p in candidates:
        if len(entries) == MAX_LIST_ENTRIES:
            entries.append(f"[stopped after {MAX_LIST_ENTRIES} entries; narrow the path or the glob]")
            break
        rel = p.relative_to(root).as_posix()
        entries.append(rel + "/" if p.is_dir() and not p.is_symlink() else rel)
    if not entries:
        return "(no files match)" if pattern else "(empty directory)"
    return cap_text("\n".join(entries), int(ctx.limits["max_output_bytes"]))


_PATH = {"type": "string", "minLength": 1, "description": "Path relative to the working directory."}

TOOLS = [
    Tool("read_file", "file",
         "Read a text file inside the working directory. Optionally only `limit` lines starting at "
         "line `offset` (1-based).",
         schema({"path": _PATH,
                 "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                 "limit": {"type": "integer", "minimum": 1, "description": "How many lines to return."}},
                required=("path",)),
         read_file, repeatable=True),
    Tool("write_file", "file",
         "Write a text file inside the working directory, replacing it if it exists and creating "
         "missing parent directories.",
         schema({"path": _PATH, "content": {"type": "string", "description": "The whole new content."}},
                required=("path", "content")),
         write_file),
    Tool("patch_file", "file",
         "Replace one exact occurrence of `old` by `new` in a file inside the working directory. "
         "`old` must match exactly once, whitespace included.",
         schema({"path": _PATH,
                 "old": {"type": "string", "minLength": 1, "description": "Exact text to replace."},
                 "new": {"type": "string", "description": "Replacement text."}},
                required=("path", "old", "new")),
         patch_file),
    Tool("list_files", "file",
         "List a directory inside the working directory (default: the working directory itself), or "
         "with `glob` search the tree below it, e.g. `*.py`.",
         schema({"path": {**_PATH, "description": "Directory relative to the working directory."},
                 "glob": {"type": "string", "minLength": 1,
                          "description": "Pattern matched against each path from the right, e.g. *.py."}}),
         list_files, repeatable=True),
]
