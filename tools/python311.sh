# Sourced by tools/make_ref_venv.sh and tools/make_sglang_venv.sh (both need Python 3.11, the version the
# reachable torch wheels are built for): is311 PATH, and find_python311, which prints the interpreter's path or
# says on stderr what it tried. Order: $PYTHON311, python3.11 on PATH, pyenv's 3.11 versions (newest first).
is311() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' >/dev/null 2>&1; }

find_python311() {
  local tried=() cands=()
  [ -n "${PYTHON311:-}" ] && cands+=("$PYTHON311")
  command -v python3.11 >/dev/null 2>&1 && cands+=("$(command -v python3.11)")
  local root="${PYENV_ROOT:-$HOME/.pyenv}" d
  for d in $(ls -d "$root"/versions/3.11* 2>/dev/null | sort -V -r); do cands+=("$d/bin/python3"); done
  local c
  for c in "${cands[@]}"; do
    tried+=("$c")
    # A pyenv shim answers for versions that are installed but not selected; resolve through it.
    if is311 "$c"; then "$c" -c 'import sys; print(sys.executable)'; return 0; fi
  done
  echo "$(basename "$0" .sh): no Python 3.11 found; tried: ${tried[*]:-nothing}. Install one (pyenv install 3.11) or set PYTHON311=/path/to/python3.11" >&2
  return 1
}
