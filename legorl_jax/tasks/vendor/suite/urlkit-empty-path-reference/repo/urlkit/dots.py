"""Path arithmetic: merging a relative path onto a base and removing '.' and '..' (RFC 3986 5.2.3-4)."""

from __future__ import annotations


def merge_paths(base_authority: str | None, base_path: str, ref_path: str) -> str:
    """Everything of the base path up to its last '/', then the reference path."""
    if base_authority is not None and base_path == "":
        return "/" + ref_path
    cut = base_path.rfind("/")
    return base_path[: cut + 1] + ref_path


def remove_dot_segments(path: str) -> str:
    output: list[str] = []
    rest = path
    while rest:
        if rest.startswith("../"):
            rest = rest[3:]
        elif rest.startswith("./"):
            rest = rest[2:]
        elif rest.startswith("/./"):
            rest = rest[2:]
        elif rest == "/.":
            rest = "/"
        elif rest.startswith("/../"):
            rest = rest[3:]
            if output:
                output.pop()
        elif rest == "/..":
            rest = "/"
            if output:
                output.pop()
        elif rest in (".", ".."):
            rest = ""
        else:
            start = 1 if rest.startswith("/") else 0
            end = rest.find("/", start)
            end = len(rest) if end == -1 else end
            output.append(rest[:end])
            rest = rest[end:]
    return "".join(output)
