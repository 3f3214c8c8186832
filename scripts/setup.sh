#!/usr/bin/env bash
# Set up MLC Workbench in ./.venv: find a Python >= 3.12, create the venv, install the project.
# Usage: bash scripts/setup.sh        (idempotent; re-running only installs what changed)
set -euo pipefail
cd "$(dirname "$0")/.."

ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
  local cand
  for cand in "${MLCWB_PYTHON:-}" python3.12 python3.13 python3 python; do
    [ -n "$cand" ] || continue
    command -v "$cand" >/dev/null 2>&1 || continue
    if ok "$cand"; then command -v "$cand"; return 0; fi
  done
  # pyenv installs that are not the active version (their shims refuse to run without PYENV_VERSION)
  if command -v pyenv >/dev/null 2>&1; then
    local root v
    root=$(pyenv root)
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.(1[2-9]|[2-9][0-9])(\.[0-9]+)?$' | sort -V); do  # 3.12 first: the version the stack is checked on
      if ok "$root/versions/$v/bin/python"; then echo "$root/versions/$v/bin/python"; return 0; fi
    done
  fi
  return 1
}

if [ ! -x .venv/bin/python ] || ! ok .venv/bin/python; then
  if ! PY=$(find_python); then
    found=$(command -v python3 >/dev/null 2>&1 && python3 -c 'import platform; print(platform.python_version())' || echo none)
    echo "setup: MLC Workbench needs Python 3.12 or newer (found $found; PySide6 6.12 crashes on 3.11), so install 3.12+ or set MLCWB_PYTHON to one." >&2
    exit 2
  fi
  echo "setup: creating .venv with $PY ($("$PY" -c 'import platform; print(platform.python_version())'))"
  rm -rf .venv
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
echo "setup: done. Start the GUI with .venv/bin/python main.py, run the tests with .venv/bin/python -m pytest"
