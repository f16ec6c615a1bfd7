"""Builds the sandbox images this host needs (idempotent; a no-op when they exist).

    python tools/build_images.py --base                    # legorl-base:<hash> + :latest, offline
    python tools/build_images.py --base --from-registry python:3.12-slim   # same layout FROM a registry image
    python tools/build_images.py --base --rootfs           # also unpack the bubblewrap root filesystem
    python tools/build_images.py --base --rebuild          # debootstrap again even when cached

Prints each image tag (and root filesystem path) it ensured. `make images` runs `--base`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from legorl_jax.sandbox import images  # noqa: E402
from legorl_jax.sandbox.base import SandboxError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", action="store_true", help="ensure the base image legorl-base")
    parser.add_argument("--from-registry", metavar="IMAGE", help="build the base FROM this registry image")
    parser.add_argument(
        "--rootfs", action="store_true", help="ensure the bubblewrap root filesystem of the base"
    )
    parser.add_argument("--rebuild", action="store_true", help="rebuild the offline base even when cached")
    args = parser.parse_args(argv)
    if not (args.base or args.rootfs):
        parser.error("nothing to do: pass --base and/or --rootfs")
    try:
        if args.base:
            start = time.perf_counter()
            tag = images.ensure_base_image(from_registry=args.from_registry, rebuild=args.rebuild)
            print(f"{tag}  ({time.perf_counter() - start:.1f} s)")
        if args.rootfs:
            from legorl_jax.sandbox import rootfs

            print(rootfs.ensure_base_rootfs())
    except SandboxError as exc:
        print(f"build_images: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
