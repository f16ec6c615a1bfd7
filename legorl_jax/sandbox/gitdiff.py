"""The agent's diff: one shell script that computes it inside the sandbox without trusting the repository.

`SCRIPT` runs as the sandbox user in the workdir with `$1` = the base commit ('' = HEAD) and prints
`git diff --binary --full-index` of everything that differs from that commit: modified, deleted and new
(untracked, not ignored) files, binary files as git binary patches, mode changes and symlinks. The output
applies with `git apply` to a clean checkout of the base commit.

Why it is safe against whatever the agent did to the repository:
- it never uses the agent's git directory as a repository, only as an object store: the index and the
  objects it writes live in a private `GIT_DIR` under a fresh temporary directory, which reads the
  repository's objects through `GIT_ALTERNATE_OBJECT_DIRECTORIES` and takes the workdir as its work tree.
  So the agent's index, refs and objects are never written (nothing the agent could see changes), and
  the agent's `.git/config` is never read: no hooks, fsmonitor, filter / textconv / external-diff
  commands, `core.autocrlf` or `core.filemode` overrides. `.gitattributes` in the tree can only name
  filters and diff drivers that our empty config does not define, so they do nothing;
- system and global config are off (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`, a fresh HOME)
  and every setting that changes diff output is pinned with `-c` on the command line;
- the base commit is resolved once, before anything else runs, and the diff is taken against that sha.
Only `.gitignore` files in the tree keep their meaning (ignored files are not part of the diff).
"""

from __future__ import annotations

import re

_REVISION = re.compile(r"^(?:[0-9a-fA-F]{4,64}|[A-Za-z0-9][A-Za-z0-9._/-]{0,199})$")

SCRIPT = r"""
set -eu
base=${1:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/legorl-diff.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES \
      GIT_CEILING_DIRECTORIES GIT_NAMESPACE GIT_COMMON_DIR GIT_EXTERNAL_DIFF GIT_DIFF_OPTS GIT_CONFIG \
      GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT GIT_ATTR_SOURCE GIT_QUARANTINE_PATH 2>/dev/null || true
export HOME="$tmp" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 \
       GIT_OPTIONAL_LOCKS=0 GIT_PAGER=cat PAGER=cat LC_ALL=C
pin() {
  git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.untrackedCache=false \
      -c core.attributesFile=/dev/null -c core.excludesFile=/dev/null -c core.autocrlf=false \
      -c core.safecrlf=false -c core.eol=lf -c core.filemode=true -c core.symlinks=true \
      -c core.ignorecase=false -c core.precomposeUnicode=false -c core.quotePath=true \
      -c core.bigFileThreshold=2047m -c core.sparseCheckout=false -c diff.external= -c diff.noprefix=false \
      -c diff.mnemonicPrefix=false -c diff.relative=false -c diff.renames=false -c diff.ignoreSubmodules=none \
      -c diff.suppressBlankEmpty=false -c color.ui=never -c gc.auto=0 -c maintenance.auto=false \
      -c safe.directory='*' -c advice.detachedHead=false "$@"
}
top=$(pin rev-parse --show-toplevel 2>/dev/null) || { echo "$(pwd) is not in a git work tree" >&2; exit 3; }
objects=$(pin -C "$top" rev-parse --git-path objects)
case $objects in /*) ;; *) objects="$top/$objects" ;; esac
sha=
if [ -n "$base" ]; then
  sha=$(pin -C "$top" rev-parse --verify -q "$base^{commit}") || { echo "base commit $base not found in $top" >&2; exit 4; }
else
  sha=$(pin -C "$top" rev-parse --verify -q 'HEAD^{commit}' 2>/dev/null) || sha=
fi
pin init -q "$tmp/repo" >/dev/null
export GIT_DIR="$tmp/repo/.git" GIT_WORK_TREE="$top" GIT_INDEX_FILE="$tmp/index"
export GIT_ALTERNATE_OBJECT_DIRECTORIES="$objects"
if [ -n "$sha" ]; then
  pin read-tree "$sha"
else
  sha=$(pin hash-object -t tree /dev/null)  # no commit yet: diff against the empty tree
fi
cd "$top"
pin add -A -- .
pin diff --cached --binary --full-index --no-color --no-ext-diff --no-textconv --no-renames \
    --src-prefix=a/ --dst-prefix=b/ "$sha" --
"""  # noqa: E501 - script lines kept whole


def is_revision(value: object) -> bool:
    """True for strings that can only name a revision (a sha or a ref name, never an option)."""
    return isinstance(value, str) and bool(_REVISION.match(value)) and ".." not in value
