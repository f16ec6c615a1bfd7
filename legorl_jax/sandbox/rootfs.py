"""Root filesystems for the bubblewrap backend, with the image facts a sandbox needs.

`resolve(image, workdir, user)` maps a spec's `image` to `(rootfs directory, ImageFacts)`:
- an absolute path to a directory is used as the root filesystem directly (a debootstrap tree, say); the
  user is `user`, else the `user` of a `legorl-rootfs.json` beside it, else root;
- a Docker image is exported once (`docker export` of a created, never started container) into
  `<cache>/rootfs/<image id>/root`, with its facts from `seed.image_facts` in `facts.json`;
- `legorl-base:<tag>` on a host without Docker is the base image's debootstrap tarball
  (`images.base_rootfs_tarball`) unpacked into `<cache>/rootfs/base-<hash>/root` (`ensure_base_rootfs`);
- any other tag on a host without Docker is a *tree image* if one was made for it (`ensure_tree_image`):
  the base root filesystem plus a host directory that is copied into the workdir at start, which is what
  a `FROM legorl-base` + `COPY repo/ /testbed` image holds (the built-in suite's task images), built
  without Docker in `<cache>/rootfs/trees/<tag>-<hash>/`.
Exports are staged and renamed into place under a lock, so concurrent first uses export once.
Files unpacked by a non-root user belong to that user; the sandbox only ever sees the tree read-only.

`owned_copy(root, uid)` is a copy of a root filesystem in which every file belongs to `uid` (made once per
root and uid, cached under `<cache>/rootfs/owned/`): the lower layer of bubblewrap's writable root, so that
the whole root is writable by a sandbox user who is an unprivileged host uid. A directory image is taken
as unchanging once copied, as a Docker image id is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from legorl_jax.sandbox import daemon, images, reaper, seed
from legorl_jax.sandbox.base import SandboxError
from legorl_jax.sandbox.cache import cache_dir, locked, staged_dir

META = "legorl-rootfs.json"


def _untar(source: Path | Iterable[bytes], target: Path) -> None:
    """Unpacks a tarball (a file, or a stream of chunks) into `target`."""
    owner = ["-p", "--numeric-owner"] if os.geteuid() == 0 else ["--no-same-owner", "--no-same-permissions"]
    streamed = not isinstance(source, Path)
    argv = ["tar", "-x", *owner, "-C", str(target), "-f", "-" if streamed else str(source)]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if streamed else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None  # stderr=PIPE
    try:
        if not isinstance(source, Path):
            assert proc.stdin is not None  # stdin=PIPE when streamed
            for chunk in source:
                proc.stdin.write(chunk)
            proc.stdin.close()
        stderr = proc.stderr.read().decode(errors="replace")
    finally:
        proc.wait(timeout=1800)
    # Device nodes cannot be created without privileges and the sandbox gets its own /dev anyway.
    errors = [
        line
        for line in stderr.splitlines()
        if line.strip() and "mknod" not in line.lower() and "Exiting with failure status" not in line
    ]
    if proc.returncode != 0 and errors:
        raise SandboxError(f"unpacking a root filesystem into {target} failed: {' '.join(errors[-5:])}")


def ensure_base_rootfs() -> Path:
    """The base image's root filesystem as a directory (built from the cached tarball; no Docker needed)."""
    key = f"base-{images.base_recipe_hash()}"
    entry = cache_dir() / "rootfs" / key
    with locked(f"rootfs-{key}"):
        if not (entry / "facts.json").is_file():
            tarball = images.base_rootfs_tarball()
            with staged_dir(entry) as staging:
                (staging / "root").mkdir()
                _untar(tarball, staging / "root")
                facts = seed.ImageFacts(
                    image_id=key,
                    user=images.BASE_USER,
                    uid=images.BASE_UID,
                    gid=images.BASE_UID,
                    home=f"/home/{images.BASE_USER}",
                    env={"PATH": images.BASE_PATH},
                    base_commit=None,
                )
                (staging / "facts.json").write_text(json.dumps(dataclasses.asdict(facts)))
    return entry / "root"


def _export(image: str, workdir: str, user: str | None) -> tuple[Path, seed.ImageFacts]:
    facts = seed.read_facts(image, workdir, user, want_seed=False)
    entry = cache_dir() / "rootfs" / facts.image_id.replace("sha256:", "")[:32]
    with locked(f"rootfs-{entry.name}"):
        if not (entry / "root").is_dir():
            api = daemon.client().api
            container = api.create_container(
                facts.image_id,
                command=["/bin/true"],
                network_disabled=True,
                labels=reaper.owner_labels({reaper.KIND: "export"}),
            )["Id"]
            try:
                with staged_dir(entry) as staging:
                    (staging / "root").mkdir()
                    _untar(api.export(container), staging / "root")
            finally:
                daemon.remove_container(api, container)
    return entry / "root", facts


def owned_copy(root: Path, uid: int) -> Path:
    """A cached copy of the root filesystem `root` whose files and directories all belong to `uid`:`uid`."""
    real = root.resolve()
    info = real.stat()
    identity = f"{real}\0{info.st_dev}\0{info.st_ino}\0{info.st_mtime_ns}"
    entry = cache_dir() / "rootfs" / "owned" / f"{hashlib.sha256(identity.encode()).hexdigest()[:16]}-{uid}"
    with locked(f"owned-{entry.name}"):
        if not (entry / "root").is_dir():
            with staged_dir(entry) as staging:
                proc = subprocess.run(
                    ["cp", "-a", "--no-target-directory", str(real), str(staging / "root")],
                    capture_output=True,
                    text=True,
                    timeout=3600,
                )
                if proc.returncode != 0:
                    raise SandboxError(f"copying the root filesystem {real} failed: {proc.stderr.strip()}")
                chown_tree(staging / "root", uid)
    return entry / "root"


def chown_tree(top: Path, uid: int) -> None:
    """Gives `top` and everything below it (links themselves, not their targets) to `uid`:`uid`."""
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, uid, uid)


def resolve(image: str, workdir: str, user: str | None) -> tuple[Path, seed.ImageFacts]:
    """The root filesystem directory and image facts for a bubblewrap sandbox of `image`."""
    if image.startswith("/"):
        return _directory(Path(image), user)
    if daemon.available():
        return _export(image, workdir, user)
    tree = tree_image_dir(image)
    if (tree / "facts.json").is_file():
        return _tree(tree, image, workdir, user)
    if image.split(":")[0] == images.BASE_REPO:
        root = ensure_base_rootfs()
        return _directory(root, user)
    raise SandboxError(
        f"image {image!r}: no Docker daemon to export it from, no tree image made for it "
        f"(ensure_tree_image), and it is not a directory; pass a root filesystem directory or "
        f"{images.BASE_REPO}:latest"
    )


def tree_image_dir(tag: str) -> Path:
    """Where the tree image named `tag` lives (whether or not it was made)."""
    digest = hashlib.sha256(tag.encode()).hexdigest()[:12]
    return cache_dir() / "rootfs" / "trees" / f"{re.sub(r'[^A-Za-z0-9._-]', '_', tag)[:100]}-{digest}"


def ensure_tree_image(
    tag: str, populate: Callable[[Path], object], *, workdir: str, base_commit: str | None = None
) -> Path:
    """Makes (once) the Docker-less image `tag`: the base root filesystem with `workdir` holding the tree
    that `populate(directory)` writes into a directory that does not exist yet. Returns the entry directory.

    For bubblewrap on hosts without Docker; `resolve(tag, ...)` finds it there. `base_commit` is recorded as
    the image's workdir HEAD (what `diff()` defaults to). An existing entry is kept: name tags by content.
    """
    if not isinstance(tag, str) or not tag or tag.startswith("/"):
        raise ValueError(f"tag must be an image name, got {tag!r}")
    if not isinstance(workdir, str) or not workdir.startswith("/") or workdir == "/":
        raise ValueError(f"workdir must be an absolute path below /, got {workdir!r}")
    entry = tree_image_dir(tag)
    with locked(f"tree-{entry.name[-12:]}"):
        if not (entry / "facts.json").is_file():
            ensure_base_rootfs()
            with staged_dir(entry) as staging:
                populate(staging / "workdir")
                if not (staging / "workdir").is_dir():
                    raise SandboxError(f"tree image {tag!r}: populate wrote no directory")
                meta = {"tag": tag, "workdir": workdir, "base_commit": base_commit}
                (staging / "facts.json").write_text(json.dumps(meta))
    return entry


def _tree(entry: Path, image: str, workdir: str, user: str | None) -> tuple[Path, seed.ImageFacts]:
    meta = json.loads((entry / "facts.json").read_text())
    if meta.get("workdir") != workdir:
        raise SandboxError(
            f"tree image {image!r} holds its tree at {meta.get('workdir')!r}, not at workdir {workdir!r}"
        )
    root, facts = _directory(ensure_base_rootfs(), user)
    return root, dataclasses.replace(
        facts,
        image_id=f"tree:{image}",
        base_commit=meta.get("base_commit"),
        workdir_source=str(entry / "workdir"),
    )


def _directory(root: Path, user: str | None) -> tuple[Path, seed.ImageFacts]:
    if not root.is_dir():
        raise SandboxError(f"root filesystem {str(root)!r} is not a directory")
    meta_file = next((p for p in (root.parent / "facts.json", root.parent / META) if p.is_file()), None)
    meta = json.loads(meta_file.read_text()) if meta_file else {}
    wanted = user or meta.get("user") or "root"
    passwd, group = (_read(root / "etc" / n) for n in ("passwd", "group"))
    uid, gid, home = seed.parse_passwd(passwd, group, wanted) if passwd else (0, 0, "/root")
    facts = seed.ImageFacts(
        image_id=meta.get("image_id", str(root)),
        user=wanted,
        uid=uid,
        gid=gid,
        home=home,
        env=meta.get("env") or {"PATH": images.BASE_PATH},
        base_commit=meta.get("base_commit"),
    )
    return root, facts


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
