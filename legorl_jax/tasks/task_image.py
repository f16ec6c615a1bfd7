"""Making a task's image exist before a trial or a grade uses it.

- Built-in tasks: the image is `FROM` the sandbox base image (`sandbox.images.ensure_base_image`, user
  `agent` owning `/testbed`) with `repo/` copied to the workdir as the one-commit repository of
  `snapshot.write_snapshot_repo`, so its HEAD is the task's `base_commit`. The git index is not copied
  (it records host inode and time stamps, which would change the build's content hash every time); it is
  rebuilt in the image from HEAD. The hidden tests are never part of the build context.
  On a host where no Docker daemon answers, the same content becomes a bubblewrap *tree image* named
  `task.image` (`sandbox.rootfs.ensure_tree_image`: the base root filesystem, with that repository copied
  into the workdir at each start), so the built-in suite runs on bubblewrap alone.
- Harbor tasks without `docker_image`: `environment/` is the build context and its Dockerfile the recipe.
- SWE-bench tasks (and Harbor tasks naming a `docker_image`): the official image is used when it is on the
  daemon, and pulled when it is missing; when no registry answers, the `ImageError` says how to bring it in
  offline (`docker save` where a registry answers, `docker load` here), and nothing is graded.

`sandbox.images.ensure_image` names what it builds by content hash; the result is tagged as `task.image` as
well, so the name the loaders chose at load time (and that the verifier and the trial start from) points at
the current build. `ensure_task_image` is synchronous and idempotent (an unchanged task re-checks a hash and
a tag); call it through `asyncio.to_thread` from async code.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from legorl_jax.sandbox import daemon, images, rootfs
from legorl_jax.sandbox.images import ImageError
from legorl_jax.tasks.schema import Task
from legorl_jax.tasks.snapshot import write_snapshot_repo

BUILTIN_IMAGE_REPO = "legorl-task"


def ensure_task_image(task: Task) -> str:
    """`task.image`, built (or re-tagged) when it is missing or out of date; raises `ImageError`."""
    if task.kind == "builtin":
        if not daemon.available():
            _tree_builtin(task)
            return task.image
        built = _build_builtin(task)
    elif task.image_context:
        context = Path(task.image_context)
        dockerfile = context / "Dockerfile"
        if not dockerfile.is_file():
            raise ImageError(f"task {task.instance_id!r}: {str(dockerfile)!r} is missing")
        built = images.ensure_image(
            context,
            dockerfile.read_text(encoding="utf-8"),
            _repo_name(task.image),
            timeout_s=task.timeouts.build_s,
        )
    else:
        if not images.image_exists(task.image):
            _pull(task)
        return task.image
    _tag(built, task.image)
    return task.image


def _build_builtin(task: Task) -> str:
    base = images.ensure_base_image()
    with tempfile.TemporaryDirectory(prefix="legorl-task-context-") as tmp:
        repo = Path(tmp) / "repo"
        sha = write_snapshot_repo(Path(task.image_context), repo)
        if sha != task.base_commit:
            raise ImageError(
                f"task {task.instance_id!r}: repo/ now commits as {sha}, the task was loaded at "
                f"{task.base_commit}; reload the suite"
            )
        (repo / ".git" / "index").unlink()
        dockerfile = "\n".join(
            [
                f"FROM {base}",
                f"COPY --chown={images.BASE_UID}:{images.BASE_UID} repo/ {task.workdir}/",
                f"RUN git -C {task.workdir} read-tree HEAD && git -C {task.workdir} update-index -q "
                "--refresh",
                f'LABEL legorl.task="{task.instance_id}" legorl.base_commit="{task.base_commit}"',
                "",
            ]
        )
        return images.ensure_image(
            Path(tmp), dockerfile, f"{BUILTIN_IMAGE_REPO}-{task.instance_id}", timeout_s=task.timeouts.build_s
        )


def _tree_builtin(task: Task) -> None:
    def populate(workdir: Path) -> None:
        sha = write_snapshot_repo(Path(task.image_context), workdir)
        if sha != task.base_commit:
            raise ImageError(
                f"task {task.instance_id!r}: repo/ now commits as {sha}, the task was loaded at "
                f"{task.base_commit}; reload the suite"
            )

    rootfs.ensure_tree_image(task.image, populate, workdir=task.workdir, base_commit=task.base_commit)


def _pull(task: Task) -> None:
    repository, _, tag = (
        task.image.rpartition(":") if ":" in task.image.rsplit("/", 1)[-1] else (task.image, "", "latest")
    )
    try:
        daemon.client().images.pull(repository, tag=tag)
    except daemon.api_error_types() as exc:
        raise ImageError(
            f"task {task.instance_id!r}: image {task.image!r} is not on the Docker daemon and pulling it "
            f"failed ({str(exc).strip()[:300]}). Where a registry answers: `docker pull {task.image} && "
            f"docker save {task.image} -o image.tar`; then here: `docker load -i image.tar`"
            + _image_hint(task)
        ) from exc
    if not images.image_exists(task.image):
        raise ImageError(
            f"task {task.instance_id!r}: pulling {task.image!r} reported success but the image is missing"
        )


def _image_hint(task: Task) -> str:
    """Where a SWE-bench-style row's image name came from, and how to name another."""
    if task.kind != "swebench":
        return ""
    source = task.metadata.get("image_source", "")
    if source and not source.startswith("template"):
        return f". The name is the row's {'image' if source == 'row' else source!r} field"
    return (
        f". The name comes from the {source or 'image template'}; a data set whose images are named "
        "otherwise loads with `--image-template` (SWE-Gym's: "
        "'xingyaoww/sweb.eval.x86_64.{swegym_instance_id}:latest') or an `image` field in each row"
    )


def _repo_name(image: str) -> str:
    return image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image


def _tag(built: str, wanted: str) -> None:
    if built == wanted:
        return
    repository, _, tag = (
        wanted.rpartition(":") if ":" in wanted.rsplit("/", 1)[-1] else (wanted, "", "latest")
    )
    try:
        daemon.client().images.get(built).tag(repository, tag)
    except daemon.api_error_types() as exc:
        raise ImageError(f"tagging {built} as {wanted} failed: {exc}") from exc
