"""Sandbox images: the offline base image, per-task images, all cached by content hash.

Base image. `ensure_base_image()` returns `legorl-base:<recipe hash>` (also tagged `legorl-base:latest`),
building it when the tag is missing, without any registry:
  1. `debootstrap --variant=minbase bookworm` from the Debian mirror the host's apt sources name, with
     `BASE_PACKAGES`; a user `agent` (uid/gid 1000) owning `/testbed`; `/etc/gitconfig` trusting every
     directory (the verifier may run git as root in the agent's repository); docs, locales and apt lists
     removed. The root filesystem is kept as a tarball under `<cache>/base/<hash>.tar`, and downloaded
     packages under `<cache>/debs/`, so a rebuild after `docker rmi` is a seconds-long import.
  2. `docker import` with `ENV PATH`, `USER agent` and `WORKDIR /testbed`.
The hash covers the recipe (suite, packages, user, image config, `RECIPE_VERSION`), not the mirror, so
every host builds the same tag for the same recipe. With a registry at hand,
`ensure_base_image(from_registry="python:3.12-slim")` builds the same layout `FROM` that image instead.

Task images. `ensure_image(context_dir, dockerfile, name)` returns `<name>:<hash>` where the hash covers
the Dockerfile text, every file of the build context (path, exec bit, content, symlink target) and the
image id of each local `FROM` image; the build (classic builder, network off by default) is skipped when
the tag exists. Both functions are synchronous (call them through `asyncio.to_thread` from async code),
idempotent and safe to run from several processes at once (a lock file per tag, re-checked under it).
Failures raise `ImageError` (a `SandboxError`) carrying the tail of the build log.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from legorl_jax.sandbox import daemon
from legorl_jax.sandbox.base import SandboxError
from legorl_jax.sandbox.cache import cache_dir, locked, staged_file

RECIPE_VERSION = 1
SUITE = "bookworm"
BASE_REPO = "legorl-base"
BASE_USER, BASE_UID = "agent", 1000
BASE_PACKAGES = ("python3", "python3-pytest", "git", "patch", "procps", "tzdata", "ca-certificates")
"""On top of minbase, which already has bash, coreutils (timeout), util-linux (setsid, prlimit) and tar."""
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_CHANGES = (f"ENV PATH={BASE_PATH}", f"USER {BASE_USER}", "WORKDIR /testbed")
_TRIM = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/lib/apt/lists",
    "var/cache/apt",
    "var/log",
)
_DEFAULT_MIRROR = "http://deb.debian.org/debian"
_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_DEBOOTSTRAP_TIMEOUT_S = 1800


class ImageError(SandboxError):
    """Building or importing an image failed."""


def base_recipe_hash() -> str:
    """Hash of everything that decides the base image's content."""
    recipe = {
        "version": RECIPE_VERSION,
        "suite": SUITE,
        "variant": "minbase",
        "packages": BASE_PACKAGES,
        "user": [BASE_USER, BASE_UID],
        "changes": BASE_CHANGES,
        "trim": _TRIM,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def debian_mirror(
    sources: Iterable[Path] = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")),
) -> str:
    """The first Debian archive URI the host's apt configuration names (deb822 or one-line format)."""
    for path in sources:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            line = line.strip()
            match = re.match(r"^URIs:\s*(\S+)", line) or re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s", line)
            if match and "security" not in match.group(1):
                return match.group(1)
    return _DEFAULT_MIRROR


def image_exists(tag: str) -> bool:
    """True when the local daemon holds `tag`."""
    import docker

    try:
        daemon.client().images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def base_rootfs_tarball(*, rebuild: bool = False) -> Path:
    """The cached base root filesystem tarball, built with debootstrap when missing (needs root)."""
    key = base_recipe_hash()
    tarball = cache_dir() / "base" / f"{key}.tar"
    with locked(f"base-rootfs-{key}"):
        if tarball.is_file() and not rebuild:
            return tarball
        if os.geteuid() != 0:
            raise ImageError(
                f"building the base root filesystem needs root (debootstrap, chroot); uid is {os.geteuid()}"
            )
        if shutil.which("debootstrap") is None:
            raise ImageError("debootstrap is not installed (tools/system_setup.sh installs it)")
        _build_rootfs_tarball(tarball)
    return tarball


def _build_rootfs_tarball(tarball: Path) -> None:
    tarball.parent.mkdir(parents=True, exist_ok=True)
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs.", dir=tarball.parent))
    root = work / "root"
    try:
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                f"--cache-dir={debs}",
                SUITE,
                str(root),
                debian_mirror(),
            ],
            "debootstrap",
            _DEBOOTSTRAP_TIMEOUT_S,
        )
        _run(
            [
                "chroot",
                str(root),
                "useradd",
                "--create-home",
                "--uid",
                str(BASE_UID),
                "--user-group",
                "--shell",
                "/bin/bash",
                BASE_USER,
            ],
            "useradd",
            120,
        )
        (root / "testbed").mkdir(exist_ok=True)
        os.chown(root / "testbed", BASE_UID, BASE_UID)
        (root / "etc" / "gitconfig").write_text("[safe]\n\tdirectory = *\n")
        (root / "etc" / "legorl-base").write_text(f"{base_recipe_hash()}\n")
        for rel in _TRIM:
            target = root / rel
            if target.is_dir():
                for child in target.iterdir():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        with staged_file(tarball) as staging:
            _run(
                ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(staging), "."], "tar", 600
            )
            staging.chmod(0o644)  # bubblewrap users need not be root
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure_base_image(*, from_registry: str | None = None, rebuild: bool = False) -> str:
    """The base image's content-hash tag, built (offline by default) when it is missing."""
    if from_registry is not None:
        if not isinstance(from_registry, str) or not from_registry.strip():
            raise ValueError(f"from_registry must be an image reference, got {from_registry!r}")
        return _ensure_registry_base(from_registry)
    tag = f"{BASE_REPO}:{base_recipe_hash()}"
    with locked(f"image-{BASE_REPO}-{base_recipe_hash()}"):
        if rebuild or not image_exists(tag):
            tarball = base_rootfs_tarball(rebuild=rebuild)
            try:
                daemon.client().api.import_image_from_file(
                    str(tarball), repository=BASE_REPO, tag=base_recipe_hash(), changes=list(BASE_CHANGES)
                )
            except daemon.api_error_types() as exc:
                raise ImageError(f"docker import of {tarball} failed: {exc}") from exc
        _tag_latest(tag)
    return tag


def registry_base_dockerfile(source: str) -> str:
    """The Dockerfile that gives a Debian-based registry image (python:3.12-slim, ...) the base layout."""
    return "\n".join(
        [
            f"FROM {source}",
            "USER root",
            # The registry image brings its own Python; the tools come from apt, pytest from pip if missing.
            "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
            + " ".join(p for p in BASE_PACKAGES if not p.startswith("python3"))
            + " && rm -rf /var/lib/apt/lists/*",
            "RUN python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install --no-cache-dir "
            "'pytest>=7.2,<9'",
            f"RUN (id -u {BASE_USER} >/dev/null 2>&1 || useradd --create-home --uid {BASE_UID} --user-group"
            f" --shell /bin/bash {BASE_USER}) && mkdir -p /testbed && chown {BASE_USER}:{BASE_USER} /testbed"
            " && printf '[safe]\\n\\tdirectory = *\\n' > /etc/gitconfig",
            *BASE_CHANGES,
            "",
        ]
    )


def _ensure_registry_base(source: str) -> str:
    with tempfile.TemporaryDirectory() as context:
        tag = ensure_image(Path(context), registry_base_dockerfile(source), BASE_REPO, network=True)
    _tag_latest(tag)
    return tag


def _tag_latest(tag: str) -> None:
    try:
        daemon.client().images.get(tag).tag(BASE_REPO, "latest")
    except daemon.api_error_types() as exc:
        raise ImageError(f"tagging {tag} as {BASE_REPO}:latest failed: {exc}") from exc


def context_hash(context_dir: Path, dockerfile: str) -> str:
    """Hash of a build: the Dockerfile text, every context file, and the ids of its local FROM images."""
    digest = hashlib.sha256()
    digest.update(f"recipe {RECIPE_VERSION}\n".encode())
    digest.update(dockerfile.encode())
    for ref in _from_images(dockerfile):
        digest.update(f"\nfrom {ref} {_local_image_id(ref)}".encode())
    for path in sorted(context_dir.rglob("*")):
        rel = path.relative_to(context_dir).as_posix()
        if path.is_symlink():
            digest.update(f"\nlink {rel} {os.readlink(path)}".encode())
        elif path.is_file():
            digest.update(f"\nfile {rel} {os.access(path, os.X_OK)} ".encode())
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        elif path.is_dir():
            digest.update(f"\ndir {rel}".encode())
    return digest.hexdigest()[:16]


def _from_images(dockerfile: str) -> list[str]:
    stages: set[str] = set()
    refs: list[str] = []
    for line in dockerfile.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "FROM":
            args = [w for w in words[1:] if not w.startswith("--")]
            if args and args[0].lower() not in stages and args[0] != "scratch":
                refs.append(args[0])
            if len(args) >= 3 and args[1].upper() == "AS":
                stages.add(args[2].lower())
    return refs


def _local_image_id(ref: str) -> str:
    import docker

    try:
        return daemon.client().images.get(ref).id
    except docker.errors.ImageNotFound:
        return "absent"


def ensure_image(
    context_dir: str | Path, dockerfile: str, name: str, *, network: bool = False, timeout_s: float = 3600.0
) -> str:
    """`<name>:<content hash>` for the image `dockerfile` builds from `context_dir`; built when missing.

    `dockerfile` is the Dockerfile's text (it need not be inside the context). The build runs with the
    classic builder and no network unless `network=True`.
    """
    context = Path(context_dir)
    if not context.is_dir():
        raise ValueError(f"context_dir must be an existing directory, got {str(context_dir)!r}")
    if not isinstance(dockerfile, str) or not any(w.upper() == "FROM" for w in dockerfile.split()):
        raise ValueError(f"dockerfile must be Dockerfile text with a FROM line, got {dockerfile!r:.200}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be a lowercase image repository name, got {name!r}")
    key = context_hash(context, dockerfile)
    tag = f"{name}:{key}"
    with locked(f"image-{name.replace('/', '_')}-{key}"):
        if not image_exists(tag):
            _build(context, dockerfile, tag, key, network=network, timeout_s=timeout_s)
    return tag


def _build(context: Path, dockerfile: str, tag: str, key: str, *, network: bool, timeout_s: float) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=False) as handle:
        handle.write(dockerfile)
    log: list[str] = []
    try:
        # An absolute Dockerfile path outside the context is sent inside the context tarball by the SDK.
        stream = daemon.client().api.build(
            path=str(context),
            dockerfile=handle.name,
            tag=tag,
            rm=True,
            forcerm=True,
            decode=True,
            pull=False,
            network_mode=None if network else "none",
            labels={"legorl.recipe": key},
            timeout=int(timeout_s),
        )
        for chunk in stream:
            if "stream" in chunk:
                log.extend(chunk["stream"].splitlines())
            if "error" in chunk:
                raise ImageError(
                    f"docker build of {tag} failed: {chunk['error'].strip()}\n" + "\n".join(log[-30:])
                )
    except daemon.api_error_types() as exc:
        raise ImageError(f"docker build of {tag} failed: {exc}\n" + "\n".join(log[-30:])) from exc
    finally:
        os.unlink(handle.name)


def _run(argv: list[str], what: str, timeout_s: float) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"{what} did not finish within {timeout_s:.0f} s") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise ImageError(f"{what} failed with exit code {proc.returncode}:\n{tail}")
