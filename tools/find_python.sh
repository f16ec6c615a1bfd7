#!/usr/bin/env bash
# Prints the path of a Python >= 3.12 interpreter, or exits 1 saying what was tried.
# Order: $PYTHON, python3.12 .. python3.14 and python3 on PATH, then pyenv's installed versions (3.12 first: the tested one).
set -u
ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }
tried=()
cands=()
[ -n "${PYTHON:-}" ] && cands+=("$PYTHON")
for v in 3.12 3.13 3.14; do command -v "python$v" >/dev/null 2>&1 && cands+=("$(command -v python$v)"); done
command -v python3 >/dev/null 2>&1 && cands+=("$(command -v python3)")
root="${PYENV_ROOT:-$HOME/.pyenv}"
for d in $(ls -d "$root"/versions/3.1[2-9]* 2>/dev/null | sort -V); do cands+=("$d/bin/python3"); done
for c in "${cands[@]}"; do
  tried+=("$c")
  # pyenv shims answer for versions that are installed but not selected; resolve through the shim first.
  if ok "$c"; then "$c" -c 'import sys; print(sys.executable)'; exit 0; fi
done
echo "no Python >= 3.12 found; tried: ${tried[*]:-nothing}. Install one (e.g. pyenv install 3.12) or set PYTHON=/path/to/python3.12" >&2
exit 1
