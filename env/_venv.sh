# Sourced by env/test.sh and env/pipeline.sh: use the active virtual environment if there is one,
# else create (once) and activate env/.venv-<name>; then install the pinned requirements.
# Offline installs: set PIP_NO_INDEX=1 and PIP_FIND_LINKS=<wheel dir> (pip reads both).
set -euo pipefail
ensure_env() {
  local name=$1 requirements=$2 py=${PYTHON:-python3}
  if ! "$py" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    local venv="$ROOT/.venv/$name"
    if [ ! -x "$venv/bin/python" ]; then
      echo "== creating $venv"
      "$py" -m venv "$venv"
    fi
    # shellcheck disable=SC1091
    source "$venv/bin/activate"
    py=python
  fi
  echo "== installing $requirements into $("$py" -c 'import sys; print(sys.prefix)')"
  "$py" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  PY=$py
}
