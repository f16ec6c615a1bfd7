"""Parsing a unified diff into per-file patches, so the verifier can filter the agent's changes file by file.

`parse_patch(text)` splits git-format diffs (`diff --git` sections with extended headers: modes, renames,
copies, `GIT binary patch` and `Binary files ... differ` blocks) and plain `diff -u` style diffs
(`--- a/x` / `+++ b/x` with hunks) into `FilePatch` records that keep each section's text verbatim.
`format_patch(patches)` joins them back. The verifier only ever applies what `format_patch` returns, so a
line the parser did not attribute to a file (a commit message, an email signature, trailing junk) is dropped,
never smuggled through.

Hunk bodies are consumed by their `@@ -a,b +c,d @@` line counts, not by pattern: a removed line that reads
`--- x` or an added line that reads `+++ y` stays inside its hunk. A diff whose hunks run past the end of the
text, or whose header cannot be read, raises `PatchError` (a `ValueError`) naming the line.

Paths are repo-relative with the `a/` / `b/` prefix removed (plain diffs: the first component, like `-p1`);
git's C-style quoted paths (`"a/x\\ty"`) are unquoted. `None` stands for `/dev/null`. A git section whose
`---` / `+++` lines name other files than its header (and rename lines) is refused: the verifier filters by
one set of paths, so git apply and patch must not write another. File modes are compared as numbers (`0120000`
is a symlink).
"""

from __future__ import annotations

import dataclasses
import re

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_MODE_HEADERS = ("old mode ", "new mode ", "deleted file mode ", "new file mode ")
_OTHER_HEADERS = (
    "similarity index ",
    "dissimilarity index ",
    "index ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
)
SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"
# Modes are compared as numbers: git reads "0120000" as a symlink too, so string equality would miss it.
_FILE_TYPE_MASK, _FILE_TYPE_SYMLINK, _FILE_TYPE_GITLINK = 0o170000, 0o120000, 0o160000
_MODE_RE = re.compile(r"^[0-7]{1,7}$")


class PatchError(ValueError):
    """The diff text cannot be read; the message names the line."""


@dataclasses.dataclass(frozen=True)
class FilePatch:
    """One file's change: its paths before and after (None = /dev/null), modes, and its verbatim text."""

    old_path: str | None
    new_path: str | None
    text: str
    binary: bool = False
    old_mode: str | None = None
    new_mode: str | None = None

    @property
    def path(self) -> str:
        """The path the change leaves behind (the old path for a deletion)."""
        return self.new_path if self.new_path is not None else self.old_path or ""

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the change reads or writes (both sides of a rename or copy)."""
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p is not None))

    @property
    def is_symlink(self) -> bool:
        return _FILE_TYPE_SYMLINK in _file_types(self)

    @property
    def is_gitlink(self) -> bool:
        return _FILE_TYPE_GITLINK in _file_types(self)

    @property
    def is_new(self) -> bool:
        return self.old_path is None


def _file_types(patch: FilePatch) -> set[int]:
    return {int(m, 8) & _FILE_TYPE_MASK for m in (patch.old_mode, patch.new_mode) if m is not None}


def parse_patch(text: str) -> list[FilePatch]:
    """Splits `text` into per-file patches; an empty or whitespace-only text gives []."""
    if not isinstance(text, str):
        raise TypeError(f"patch text must be str, got {type(text).__name__}")
    lines = split_lines(text)
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            patch, i = _parse_git_section(lines, i)
            patches.append(patch)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patch, i = _parse_plain_section(lines, i)
            patches.append(patch)
        else:
            i += 1  # not part of any file's change: never applied
    return patches


def format_patch(patches: list[FilePatch]) -> str:
    """The text `git apply` receives: each kept section verbatim, in order."""
    return "".join(p.text for p in patches)


def split_lines(text: str) -> list[str]:
    """Lines of `text` with their `\\n` kept; only `\\n` ends a line, as in git."""
    # str.splitlines would also split on \r, \x0c, \x1c..., which are ordinary bytes inside a diff line.
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _parse_git_section(lines: list[str], start: int) -> tuple[FilePatch, int]:
    header = lines[start]
    a_path, b_path = _paths_from_diff_git(header, start)
    old_path: str | None = a_path
    new_path: str | None = b_path
    old_mode = new_mode = None
    binary = False
    i = start + 1
    while i < len(lines):
        line = lines[i].rstrip("\r\n")
        if line.startswith(_MODE_HEADERS):
            mode = line.rsplit(" ", 1)[1]
            if not _MODE_RE.match(mode):
                raise PatchError(f"line {i + 1}: {line!r} holds no octal file mode")
            if line.startswith(("old mode ", "deleted file mode ")):
                old_mode = mode
            if line.startswith(("new mode ", "new file mode ")):
                new_mode = mode
            if line.startswith("deleted file mode "):
                new_path = None
            if line.startswith("new file mode "):
                old_path = None
            i += 1
        elif line.startswith(_OTHER_HEADERS):
            if line.startswith(("rename from ", "copy from ")):
                old_path = _unquote(line.split(" ", 2)[2], i)
            elif line.startswith(("rename to ", "copy to ")):
                new_path = _unquote(line.split(" ", 2)[2], i)
            elif line.startswith("index ") and old_mode is None and new_mode is None:
                fields = line.split()
                if len(fields) == 3:  # "index abc..def 100644": mode unchanged
                    if not _MODE_RE.match(fields[2]):
                        raise PatchError(f"line {i + 1}: {line!r} holds no octal file mode")
                    old_mode = new_mode = fields[2]
            i += 1
        else:
            break
    if i < len(lines) and lines[i].startswith("GIT binary patch"):
        binary = True
        i += 1
        while i < len(lines) and not lines[i].startswith("diff --git "):
            i += 1
    elif i < len(lines) and lines[i].startswith("Binary files "):
        binary = True
        i += 1
    elif i + 1 < len(lines) and lines[i].startswith("--- ") and lines[i + 1].startswith("+++ "):
        minus, plus = _side_path(lines[i], i), _side_path(lines[i + 1], i + 1)
        # git apply and patch write what ---/+++ name; the filter checks the header's paths. A section whose
        # two disagree (header README.md, +++ conftest.py) would be checked against one file and write
        # another.
        if minus != old_path or plus != new_path:
            raise PatchError(
                f"line {start + 1}: the header {header.strip()!r} and its ---/+++ lines name different "
                f"files ({old_path!r} -> {new_path!r} vs {minus!r} -> {plus!r})"
            )
        i = _consume_hunks(lines, i + 2)
    if old_path is None and new_path is None:
        raise PatchError(f"line {start + 1}: {header.strip()!r} has neither an old nor a new path")
    text = "".join(lines[start:i])
    if not text.endswith("\n"):
        text += "\n"
    return FilePatch(old_path, new_path, text, binary, old_mode, new_mode), i


def _parse_plain_section(lines: list[str], start: int) -> tuple[FilePatch, int]:
    old_path, new_path = _side_path(lines[start], start), _side_path(lines[start + 1], start + 1)
    if old_path is None and new_path is None:
        raise PatchError(f"line {start + 1}: both sides of the diff are /dev/null")
    end = _consume_hunks(lines, start + 2)
    if end == start + 2:
        raise PatchError(f"line {start + 1}: {lines[start].strip()!r} is followed by no hunk")
    text = "".join(lines[start:end])
    if not text.endswith("\n"):
        text += "\n"
    return FilePatch(old_path, new_path, text), end


def _consume_hunks(lines: list[str], i: int) -> int:
    """Index of the first line after the hunks starting at `i`."""
    while i < len(lines) and lines[i].startswith("@@"):
        m = _HUNK_RE.match(lines[i])
        if m is None:
            raise PatchError(f"line {i + 1}: malformed hunk header {lines[i].strip()!r}")
        old_left = int(m.group(2)) if m.group(2) is not None else 1
        new_left = int(m.group(4)) if m.group(4) is not None else 1
        header_line = i
        i += 1
        while old_left > 0 or new_left > 0:
            if i >= len(lines):
                raise PatchError(
                    f"line {header_line + 1}: hunk ends early ({old_left} old, {new_left} new lines missing)"
                )
            tag = lines[i][:1]
            if tag in (" ", "\n", "\r"):  # "\n": a context line whose trailing space an editor removed
                old_left, new_left = old_left - 1, new_left - 1
            elif tag == "-":
                old_left -= 1
            elif tag == "+":
                new_left -= 1
            elif tag != "\\":
                raise PatchError(f"line {i + 1}: {lines[i].rstrip()!r} inside a hunk")
            if old_left < 0 or new_left < 0:
                raise PatchError(f"line {header_line + 1}: hunk holds more lines than its header says")
            i += 1
        while i < len(lines) and lines[i].startswith("\\"):  # "\ No newline at end of file"
            i += 1
    return i


def _side_path(line: str, index: int) -> str | None:
    raw = line[4:].rstrip("\r\n")
    if "\t" in raw and not raw.startswith('"'):
        raw = raw.split("\t", 1)[0]  # diff -u appends a tab and a timestamp
    if raw == "/dev/null":
        return None
    return _strip_prefix(_unquote(raw, index), index)


def _paths_from_diff_git(line: str, index: int) -> tuple[str, str]:
    rest = line[len("diff --git ") :].rstrip("\r\n")
    if rest.startswith('"'):
        a_raw, rest = _take_quoted(rest, index)
        b_raw = rest.strip()
        return _strip_prefix(_unquote(a_raw, index), index), _strip_prefix(_unquote(b_raw, index), index)
    if rest.endswith('"'):
        cut = rest.rfind(' "')
        return _strip_prefix(rest[:cut], index), _strip_prefix(_unquote(rest[cut + 1 :], index), index)
    # Unquoted paths may contain spaces: "a/x y b/x y". Both halves are equal for anything but a rename,
    # whose real paths come from the "rename from/to" lines anyway.
    half = (len(rest) - 1) // 2
    if len(rest) % 2 == 1 and rest[half] == " " and rest[:half][2:] == rest[half + 1 :][2:]:
        return _strip_prefix(rest[:half], index), _strip_prefix(rest[half + 1 :], index)
    parts = rest.split(" b/", 1)
    if len(parts) != 2:
        raise PatchError(f"line {index + 1}: cannot read the paths of {line.strip()!r}")
    return _strip_prefix(parts[0], index), parts[1]


def _take_quoted(text: str, index: int) -> tuple[str, str]:
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return text[: i + 1], text[i + 1 :]
        i += 1
    raise PatchError(f"line {index + 1}: unterminated quoted path {text!r}")


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(raw: str, index: int) -> str:
    if not (len(raw) >= 2 and raw.startswith('"') and raw.endswith('"')):
        return raw
    body, out, i = raw[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
        elif body[i + 1 : i + 2] in _ESCAPES:
            out.append(_ESCAPES[body[i + 1]])
            i += 2
        elif re.match(r"[0-7]{3}", body[i + 1 : i + 4]):
            value = int(body[i + 1 : i + 4], 8)
            if value > 0xFF:
                raise PatchError(
                    f"line {index + 1}: octal escape \\{body[i + 1 : i + 4]} above \\377 in quoted path "
                    f"{raw!r}"
                )
            out.append(value)
            i += 4
        else:
            raise PatchError(f"line {index + 1}: bad escape in quoted path {raw!r}")
    return out.decode("utf-8", errors="surrogateescape")


def _strip_prefix(path: str, index: int) -> str:
    if "/" not in path:
        raise PatchError(f"line {index + 1}: path {path!r} lacks the a/ or b/ prefix component")
    return path.split("/", 1)[1]
