"""Every user file read and every output written: the one gate between fleetplan and the disk.

Reading: only regular files (a device, a pipe, a socket or a directory is refused by name
before anything is opened for reading), at most :data:`MAX_INPUT_BYTES`, UTF-8 with or
without a byte-order mark; YAML through :class:`StrictLoader`, which refuses duplicate keys
and every tag beyond plain mappings, lists, strings, numbers, booleans, nulls and dates.
Writing: an output path is checked before any work is done (:func:`check_output_file`,
:func:`check_output_dir`): never one of the command's inputs, never a directory where a file
is wanted, in an existing writable directory; then written atomically with the user's umask
(:func:`write_atomically`). This module holds no planning logic and imports nothing of the
planner.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

MAX_INPUT_BYTES = 16 * 1024 * 1024
"""Largest user file read (16 MiB): the largest shipped catalog is under 100 kB and a 168-hour
profile under 4 kB, so anything bigger is a wrong path, not an input."""

ECHO_CHARS = 80
# Longest echo of a refused value inside a field's message (several may share one line).
FIELD_ECHO_CHARS = 40
"""Most characters of a user's value quoted back in an error message."""

MAX_MESSAGE_CHARS = 1000
"""Most characters of one error line; a longer one keeps its head and tail."""

MAX_ALIASED_NODES = 100_000
"""Most YAML nodes that aliases (``*name``) may repeat in one document, each counted as if written
out: reusing a block of options in a hundred products repeats a few thousand, while nested
aliases ("billion laughs") repeat billions from a few lines, which no check downstream could
walk, validate or quote back in a message in bounded time."""

MAX_CATALOG_FILES = 32
"""Most extra catalog files one command merges (a scenario's ``catalogs:`` and ``--catalog``
together): overlays of one's own prices, GPUs and models are a handful, and each may hold
:data:`MAX_INPUT_BYTES`, so the count bounds what a command reads (a list repeating one file
thousands of times took minutes, outside the command's deadline)."""

_REPR_DEPTH = 20
# Nesting levels :func:`bounded_repr` descends before writing "…": deeper values are no input.

_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge")
)


class InputError(ValueError):
    """Bad user input (file, field or flag); the message is one line for the user."""


def short(value: Any, limit: int = ECHO_CHARS) -> str:
    """``value`` as text (strings as themselves, anything else as :func:`bounded_repr`) cut to
    ``limit`` characters with "…"."""
    text = value[: limit + 1] if isinstance(value, str) else bounded_repr(value, limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_repr(value: Any, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters with "…" (for quoting a user's value)."""
    return short(bounded_repr(value, limit), limit)


def bounded_repr(value: Any, limit: int) -> str:
    """``repr(value)`` when it is at most ``limit`` characters long; otherwise its first
    ``limit + 1`` or more characters, rendered without rendering the rest.

    A user's value is cut before it is rendered: the ``repr`` of a list with a billion items, or
    of a number of a million digits, would take minutes and gigabytes only to be cut to a few
    dozen characters. Lists, tuples and dicts are written piece by piece and stop once past
    ``limit``; strings are cut first; integers too long to print are described by their size.
    """
    out: list[str] = []
    length = 0
    for piece in _repr_pieces(value, 0):
        out.append(piece)
        length += len(piece)
        if length > limit:
            break
    return "".join(out)


def _repr_pieces(value: Any, depth: int) -> Iterator[str]:
    """The text of ``repr(value)`` in pieces, each piece bounded, so a caller may stop early."""
    if isinstance(value, str):
        yield repr(value[:MAX_MESSAGE_CHARS])  # a longer one is cut by the caller anyway
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3000:
        yield f"<a whole number of about {int(value.bit_length() * 0.30103):,} digits>"
    elif isinstance(value, (list, tuple, dict)):
        if depth >= _REPR_DEPTH:
            yield "…"
            return
        brackets = "[]" if isinstance(value, list) else "()" if isinstance(value, tuple) else "{}"
        yield brackets[0]
        items = value.items() if isinstance(value, dict) else value
        for i, item in enumerate(items):
            if i:
                yield ", "
            if isinstance(value, dict):
                yield from _repr_pieces(item[0], depth + 1)
                yield ": "
                yield from _repr_pieces(item[1], depth + 1)
            else:
                yield from _repr_pieces(item, depth + 1)
        if isinstance(value, tuple) and len(value) == 1:
            yield ","
        yield brackets[1]
    else:
        yield repr(value)


def one_line(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` on one line (a message with line breaks has its whitespace runs made one
    space), at most ``limit`` characters: a longer one keeps its start and its end (where the
    nearest valid choice usually is)."""
    text = " ".join(message.split()) if "\n" in message or "\r" in message else message
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]} … {text[-(limit - head - 3):]}"


# ---------------------------------------------------------------- reading
def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size_text(n: int) -> str:
    """A byte count for people: MiB from one MiB up, else bytes."""
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def read_bytes(path: Path, noun: str = "file", error: type[InputError] = InputError, where: str = "",
               limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    ``path`` is checked with ``os.stat`` (symlinks followed) before it is opened, so a
    directory, a device (``/dev/zero``) or a named pipe is refused without blocking or reading;
    the file is then opened non-blocking and checked again, so a file swapped in between is
    refused too. Every problem raises ``error`` as one line: ``{where}{noun} ...: {path}``.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{where}{noun} not found: {path}") from None
    except OSError as exc:
        raise error(f"{where}cannot read {noun} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{where}{noun} {path} is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise error(f"{where}{noun} {path} is {_size_text(st.st_size)}; input files are limited to {_size_text(limit)}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise error(f"{where}cannot read {noun} {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{where}{noun} {path} is {_kind(st.st_mode)}, not a regular file")
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise error(f"{where}cannot read {noun} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise error(f"{where}{noun} {path} is larger than {_size_text(limit)}, the limit for input files")
    return data


def read_text(path: Path, noun: str = "file", error: type[InputError] = InputError, where: str = "") -> str:
    """The text of the user's file ``path``: :func:`read_bytes`, decoded as UTF-8 with or
    without a byte-order mark. A byte that is not UTF-8 raises ``error`` naming the line."""
    data = read_bytes(Path(path), noun, error, where)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise error(f"{where}{path}: line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the {noun} as UTF-8") from None


_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser is much faster


class StrictLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """PyYAML's safe loader that also refuses duplicate keys and any non-plain tag.

    A duplicated key would silently keep its last value (``time_limit_s`` given twice); a tag
    such as ``!!set``, ``!!binary``, ``!!python/...`` or a custom ``!thing`` builds values the
    schemas do not expect. Both are reported with their line.
    """

    def get_single_data(self) -> Any:
        """The document's value, built only after :func:`check_aliases` has bounded it."""
        node = self.get_single_node()
        if node is None:
            return None
        check_aliases(node)
        return self.construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Construct ``node`` after checking that its tag is a plain one."""
        if node.tag not in _PLAIN_TAGS:
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise yaml.constructor.ConstructorError(
                None, None, f"tag {short(tag, 40)} is not allowed (use plain mappings, lists, strings, numbers, "
                            "booleans and dates)", node.start_mark)
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:  # e.g. a 5,000-digit integer, the date 2025-13-45
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read the value {short(str(node.value), 40)}: {short(str(exc).split(';')[0], 120)}",
                node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        """Construct a mapping, refusing a key that appears twice in it."""
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if value_node.tag not in _PLAIN_TAGS:  # named by its field, not only its line
                    tag = value_node.tag.replace("tag:yaml.org,2002:", "!!")
                    raise yaml.constructor.ConstructorError(
                        None, None, f"{short(key, 40)}: tag {short(tag, 40)} is not allowed (use plain mappings, "
                                    "lists, strings, numbers, booleans and dates)", value_node.start_mark)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key is refused by the base constructor
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {short_repr(key, 40)} appears twice (first on line {first}); "
                                    "keep one", key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)



def _children(node: yaml.Node) -> list[yaml.Node]:
    """The nodes a composed YAML node holds: a list's items, a mapping's keys and values."""
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_aliases(root: yaml.Node, limit: int = MAX_ALIASED_NODES) -> None:
    """Refuse a composed document whose aliases repeat more than ``limit`` nodes, or one whose
    alias stands for a node that contains it, before any value is built.

    A composed document shares the node an alias names instead of copying it, so a "billion
    laughs" composes in microseconds; its size written out is counted here instead, walking
    each list and mapping once (depth first, without recursion): every repeated reference to
    one adds the written-out size of what it names (an alias of a single value adds one node,
    as writing the value out would, and is not counted). Raises a ``ConstructorError`` at the mapping or list
    that holds the alias crossing the limit.
    """
    size: dict[int, int] = {}  # written-out size of each finished node, by id
    open_nodes: set[int] = set()  # nodes on the current path (an alias to one is a cycle)
    repeated = 0
    stack: list[list[Any]] = [[root, iter(_children(root)), 1]]
    open_nodes.add(id(root))
    while stack:
        frame = stack[-1]
        for child in frame[1]:
            if isinstance(child, yaml.ScalarNode):  # an alias of one value adds one node, as writing it out does
                frame[2] += 1
                continue
            key = id(child)
            if key in size:
                repeated += size[key]
                frame[2] += size[key]
                if repeated > limit:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"aliases repeat more than {limit:,} nodes (nested aliases expand "
                                    "exponentially); write the values out or repeat fewer", frame[0].start_mark)
            elif key in open_nodes:
                raise yaml.constructor.ConstructorError(
                    None, None, "aliases refer to a value that contains them (a value cannot hold itself)",
                    frame[0].start_mark)
            else:
                open_nodes.add(key)
                stack.append([child, iter(_children(child)), 1])
                break
        else:
            stack.pop()
            open_nodes.discard(id(frame[0]))
            size[id(frame[0])] = frame[2]
            if stack:
                stack[-1][2] += frame[2]


def parse_yaml(text: str, where: Path | str, error: type[InputError] = InputError) -> Any:
    """Parse YAML ``text`` with :class:`StrictLoader`; a problem raises ``error`` naming
    ``where`` and the line."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        what = "" if problem.startswith(("tag ", "key ", "cannot read", "aliases ")) or ": tag " in problem else "malformed YAML: "
        raise error(f"{where}:{line}: {what}{problem}") from None
    except RecursionError:
        raise error(f"{where}: malformed YAML: nested too deeply") from None


def yaml_line(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (mapping keys and list indices) in ``text``:
    the deepest node found along ``loc`` (for a missing field, the mapping that lacks it)."""
    try:
        node = yaml.compose(text, Loader=StrictLoader)  # noqa: S506 - composes nodes, builds no objects
    except yaml.YAMLError:
        return None
    line = None
    for part in loc:
        found = None
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            found = node.value[part]
        if found is None:
            break
        node = found
        line = node.start_mark.line + 1
    return line


def at_line(message: str, where: str, line: int | None) -> str:
    """``message`` (which starts with ``where`` and then ``.`` or ``: ``) with the line put after
    ``where`` as ``where:LINE: ``; unchanged when the line is unknown or the start differs."""
    if line is None:
        return message
    for sep in (": ", "."):
        if message.startswith(where + sep):
            return f"{where}:{line}: {message[len(where) + len(sep):]}"
    return message


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a key given twice raises ``ValueError``."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {short_repr(k, 40)} appears twice")
        out[k] = v
    return out


def read_json(path: Path, noun: str = "file", error: type[InputError] = InputError, where: str = "") -> Any:
    """The JSON document in the user's file ``path`` (read as :func:`read_text`); malformed JSON
    or a duplicated key raises ``error`` naming the file and the line."""
    text = read_text(path, noun, error, where)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise error(f"{where}{path}: line {exc.lineno}: malformed JSON: {exc.msg}") from None
    except ValueError as exc:  # a duplicated key, or an integer of more digits than Python converts
        raise error(f"{where}{path}: {short(str(exc).split(';')[0], 120)}") from None
    except RecursionError:
        raise error(f"{where}{path}: malformed JSON: nested too deeply") from None


# ---------------------------------------------------------------- writing
def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are the same file (same device and inode; by resolved path when
    one does not exist yet)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _writable_dir(d: Path, flag: str, what: Path) -> None:
    """Raise unless ``d`` is an existing directory this user may create files in."""
    if not d.exists():
        raise InputError(f"{flag}: directory {d} does not exist (for {what})")
    if not d.is_dir():
        raise InputError(f"{flag}: {d} is not a directory (for {what})")
    _try_create_in(d, flag)


def _try_create_in(d: Path, flag: str) -> None:
    """Create and remove a temporary file in ``d``: the one test of writability that holds for
    every user (root included) and every file system (read-only mounts, /proc)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".fleetplan-check.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"{flag}: cannot write to directory {d}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(tmp)


def _not_an_input(path: Path, flag: str, inputs: Iterable[Path | str], shown: Path) -> None:
    """Raise when ``path`` is (or links to) one of ``inputs``; the message shows ``shown``."""
    for i in inputs:
        if _same_file(path, Path(i)):
            which = "" if Path(i) == shown else f" ({i})"
            raise InputError(f"{flag}: {shown} is one of this command's input files{which}; write the output to "
                             "another file")


def check_output_file(path: Path | str, flag: str, inputs: Iterable[Path | str] = (),
                      suffixes: tuple[str, ...] = ()) -> Path:
    """The file to write for ``flag`` (symlinks resolved), checked before any work is done.

    Refused with one line naming ``flag``: a path that is (or links to) one of ``inputs``, an
    existing directory, device or pipe, a read-only file, a parent directory that is missing
    or not writable, and (with ``suffixes``) a name without one of those endings.
    """
    given = Path(path)
    if suffixes and given.suffix.lower() not in suffixes:
        raise InputError(f"{flag}: file must end in {' or '.join(suffixes)} (got {short(str(given))})")
    if str(path).endswith(os.sep) or given.is_dir():
        raise InputError(f"{flag}: {given} is a directory; give a file name")
    target = Path(os.path.realpath(given))
    _not_an_input(target, flag, inputs, given)
    if target.exists():
        mode = os.stat(target).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{flag}: {given} is {_kind(mode)}, not a regular file")
        if not os.access(target, os.W_OK):
            raise InputError(f"{flag}: {given} is read-only; remove it or choose another file")
    _writable_dir(target.parent, flag, given)
    return target


def check_output_dir(path: Path | str, flag: str, inputs: Iterable[Path | str] = ()) -> Path:
    """The directory to write into for ``flag``, checked before any work is done.

    It may not exist yet (it is created by :func:`make_output_dir`), but then its nearest
    existing ancestor must be a writable directory; an existing one must be a writable
    directory and not one of ``inputs``.
    """
    given = Path(path)
    target = Path(os.path.realpath(given))
    if target.exists():
        if not target.is_dir():
            raise InputError(f"{flag}: with several scenarios --out is a directory, but {given} is a file")
        _not_an_input(target, flag, inputs, given)
        _try_create_in(target, flag)
        return target
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    _writable_dir(ancestor, flag, given)
    return target


def make_output_dir(path: Path) -> None:
    """Create the output directory ``path`` (and missing parents), with the user's umask."""
    path.mkdir(parents=True, exist_ok=True)


def _umask() -> int:
    """The process's file-creation mask (read without changing it where the system allows)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: Path | str, content: str | bytes) -> None:
    """Write ``content`` to ``path`` through a temporary file in the same directory and a rename.

    Readers see the old file or the whole new one, never a part; on any failure (an interrupt
    included) the temporary file is removed and ``path`` is left as it was. The file gets the
    mode a plain ``open`` would give (0666 less the umask), not the temporary file's 0600. A
    file system error (disk full, permissions) raises :class:`InputError` naming the file.
    """
    path = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise
