"""What a sandbox must know about its image before it starts, read once per image and cached on disk.

`ImageFacts`: the image id, the user commands run as (spec.user, else the image's `USER`, else root) with
its uid, gid and home, the image's environment, and the workdir's git HEAD (the `base_commit` diffs
default to). A read-only-root sandbox also needs a *seed*: a tarball holding the
image's workdir and the user's home, paths relative to `/`, that is unpacked into the tmpfs mounted over
each (the tmpfs would otherwise hide the image's content; Docker does not copy image content into tmpfs).

The facts come from the image itself without running it: `inspect_image`, then `get_archive` of
/etc/passwd, /etc/group, the workdir and the home from a container that is created and never started.
They are stored under `<cache>/seeds/<key>.{json,tar}` with key = hash(image id, workdir, user), so each
host reads an image once; a lock makes concurrent first starts read it once too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import posixpath
import tarfile
from pathlib import Path
from typing import Any

from legorl_jax.sandbox import daemon, reaper
from legorl_jax.sandbox.base import SandboxError
from legorl_jax.sandbox.cache import cache_dir, locked, staged_file

FACTS_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ImageFacts:
    image_id: str
    user: str  # what exec runs as: a name, or "uid[:gid]" when the image has no such passwd entry
    uid: int
    gid: int
    home: str
    env: dict[str, str]
    base_commit: str | None
    seed: str | None = None  # host path of the seed tarball (read-only roots only)
    workdir_source: str | None = None  # host tree copied into the workdir (bubblewrap tree images only)


def parse_passwd(passwd: str, group: str, user: str) -> tuple[int, int, str]:
    """(uid, gid, home) of `user` ("name", "uid", "name:group" or "uid:gid"); raises `SandboxError` if
    unknown."""
    name, _, group_name = user.partition(":")
    entries = [line.split(":") for line in passwd.splitlines() if line.count(":") >= 6]
    match = next((e for e in entries if e[0] == name or (name.isdigit() and e[2] == name)), None)
    if match is None and not name.isdigit():
        raise SandboxError(f"user {user!r} does not exist in the image's /etc/passwd")
    uid = int(match[2]) if match else int(name)
    gid = int(match[3]) if match else uid
    home = match[5] if match and match[5] else "/"
    if group_name:
        groups = [line.split(":") for line in group.splitlines() if line.count(":") >= 3]
        found = next((g for g in groups if g[0] == group_name or g[2] == group_name), None)
        if found is None and not group_name.isdigit():
            raise SandboxError(
                f"group {group_name!r} of user {user!r} does not exist in the image's /etc/group"
            )
        gid = int(found[2]) if found else int(group_name)
    return uid, gid, home


def git_head(read: Any, git_dir: str) -> str | None:
    """The commit `HEAD` names in `git_dir`, reading files with `read(path) -> bytes | None` (loose or packed
    refs)."""
    head = (read(f"{git_dir}/HEAD") or b"").decode(errors="replace").strip()
    if not head.startswith("ref:"):
        return head if len(head) in (40, 64) else None
    ref = head[4:].strip()
    loose = (read(f"{git_dir}/{ref}") or b"").decode(errors="replace").strip()
    if len(loose) in (40, 64):
        return loose
    for line in (read(f"{git_dir}/packed-refs") or b"").decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref:
            return parts[0]
    return None  # an unborn branch: no commit yet


def _archive(api: Any, container: str, path: str) -> Any | None:
    import docker

    try:
        stream, _ = api.get_archive(container, path)
    except docker.errors.NotFound:
        return None
    return stream


def _read_small(api: Any, container: str, path: str) -> bytes | None:
    """The content of one regular file of the image, or None when it does not exist."""
    stream = _archive(api, container, path)
    if stream is None:
        return None
    with tarfile.open(fileobj=io.BufferedReader(_StreamReader(stream)), mode="r|") as archive:
        for member in archive:
            extracted = archive.extractfile(member) if member.isreg() else None
            if extracted is not None:
                return extracted.read()
    return None


def _copy_rebased(stream: Any, path: str, out: tarfile.TarFile) -> None:
    """Streams `get_archive(path)` into `out` with names relative to '/' (get_archive names them from
    basename(path))."""
    parent = posixpath.dirname(path.rstrip("/")).lstrip("/")
    with tarfile.open(fileobj=io.BufferedReader(_StreamReader(stream)), mode="r|") as archive:
        for member in archive:
            member.name = posixpath.join(parent, member.name) if parent else member.name
            if member.islnk():
                member.linkname = posixpath.join(parent, member.linkname) if parent else member.linkname
            out.addfile(member, archive.extractfile(member) if member.isreg() else None)


class _StreamReader(io.RawIOBase):
    """A readable file over the SDK's chunk generator."""

    def __init__(self, chunks: Any) -> None:
        self._chunks = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def read_facts(image: str, workdir: str, user: str | None, want_seed: bool) -> ImageFacts:
    """`image_facts`, synchronously (for callers already on a worker thread)."""
    import docker

    api = daemon.client().api
    try:
        info = api.inspect_image(image)
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(
            f"image {image!r} not found (build it, e.g. tools/build_images.py --base)"
        ) from exc
    config = info.get("Config") or {}
    user = user or config.get("User") or "root"
    key = hashlib.sha256(
        json.dumps([FACTS_VERSION, info["Id"], workdir, user, want_seed]).encode()
    ).hexdigest()[:20]
    meta_path = cache_dir() / "seeds" / f"{key}.json"
    with locked(f"seed-{key}"):
        if meta_path.is_file():
            return ImageFacts(**json.loads(meta_path.read_text()))
        container = api.create_container(
            info["Id"],
            command=["/bin/true"],
            user="root",
            network_disabled=True,
            labels=reaper.owner_labels({reaper.KIND: "probe"}),
        )["Id"]
        try:
            facts = _probe(api, container, info, workdir, user, want_seed, meta_path.with_suffix(".tar"))
        finally:
            daemon.remove_container(api, container)
        with staged_file(meta_path) as staging:
            staging.write_text(json.dumps(dataclasses.asdict(facts)))
        return facts


def _probe(
    api: Any, container: str, info: dict, workdir: str, user: str, want_seed: bool, seed_path: Path
) -> ImageFacts:
    passwd = (_read_small(api, container, "/etc/passwd") or b"").decode(errors="replace")
    group = (_read_small(api, container, "/etc/group") or b"").decode(errors="replace")
    uid, gid, home = parse_passwd(passwd, group, user)
    env = dict(e.split("=", 1) for e in (info.get("Config") or {}).get("Env") or [] if "=" in e)
    base = git_head(lambda p: _read_small(api, container, p), f"{workdir.rstrip('/')}/.git")
    seed = None
    if want_seed:
        with staged_file(seed_path) as staging, tarfile.open(staging, "w") as out:
            work_stream = _archive(api, container, workdir)
            if work_stream is not None:
                _copy_rebased(work_stream, workdir, out)
            home_stream = _archive(api, container, home) if _separate(home, workdir) else None
            if home_stream is not None:
                _copy_rebased(home_stream, home, out)
        seed = str(seed_path)
    return ImageFacts(
        image_id=info["Id"], user=user, uid=uid, gid=gid, home=home, env=env, base_commit=base, seed=seed
    )


def _separate(home: str, workdir: str) -> bool:
    """True when the home needs its own mount: it exists as a real directory apart from the workdir."""
    if home in ("/", ""):
        return False
    h, w = home.rstrip("/") + "/", workdir.rstrip("/") + "/"
    return not (h.startswith(w) or w.startswith(h))


async def image_facts(image: str, workdir: str, user: str | None, *, want_seed: bool) -> ImageFacts:
    """The cached facts of a Docker image (read from the image on first use)."""
    try:
        return await daemon.call(read_facts, image, workdir, user, want_seed)
    except SandboxError:
        raise
    except daemon.api_error_types() as exc:
        raise SandboxError(f"reading image {image!r} failed: {exc}") from exc


def home_needs_mount(facts: ImageFacts, workdir: str) -> bool:
    return _separate(facts.home, workdir)
