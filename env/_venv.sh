# Sourced by env/test.sh and env/pipeline.sh: use the active virtual environment if there is one,
# else create (once) and activate .venv/<name>; then install the pinned requirements.
# Offline installs: set PIP_NO_INDEX=1 and PIP_FIND_LINKS=<wheel dir> (pip reads both).
set -euo pipefail
# ensure_env NAME REQUIREMENTS [MIN_PYTHON]: MIN_PYTHON (e.g. 3.12) is refused in one line, before pip
# runs, when the interpreter is older; a venv created here whose install fails is removed again, so
# that the next attempt starts clean instead of from a half-built environment.
ensure_env() {
  local name=$1 requirements=$2 min=${3:-} py=${PYTHON:-python3} venv="" created=0
  if [ -n "$min" ] && ! "$py" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$min'.split('.'))))"; then
    echo "$(basename "$0"): needs Python $min or newer for $requirements; $py is $("$py" -c 'import platform; print(platform.python_version())') (set PYTHON=/path/to/python$min)" >&2
    exit 2
  fi
  if ! "$py" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    venv="$ROOT/.venv/$name"
    if [ ! -x "$venv/bin/python" ]; then
      echo "== creating $venv"
      "$py" -m venv "$venv"
      created=1
    fi
    # shellcheck disable=SC1091
    source "$venv/bin/activate"
    py=python
  fi
  # A venv made here remembers the pins it was installed from (the list and the lists it includes): the
  # same pins again skip pip, which takes seconds even when nothing is missing.
  local stamp="" want=""
  if [ -n "$venv" ]; then
    stamp="$venv/.installed-from"
    want=$(_pins_digest "$requirements" "$py")
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
      echo "== $requirements installed in $venv already (to install again: rm $stamp)"
      PY=$py
      return 0
    fi
    rm -f "$stamp"
  fi
  echo "== installing $requirements into $("$py" -c 'import sys; print(sys.prefix)')"
  if ! "$py" -m pip install --quiet --disable-pip-version-check -r "$requirements"; then
    if [ "$created" = 1 ]; then
      deactivate 2>/dev/null || true
      rm -rf "$venv"
      echo "$(basename "$0"): installing $requirements failed (pip's message above); $venv removed" >&2
    else
      echo "$(basename "$0"): installing $requirements failed (pip's message above)" >&2
    fi
    exit 1
  fi
  if [ -n "$stamp" ] && [ -n "$want" ]; then
    echo "$want" > "$stamp"
  fi
  PY=$py
}

# _pins_digest REQUIREMENTS PYTHON: a digest of the list, the lists it names (-r, -c, --requirement,
# --constraint) and the interpreter's version
_pins_digest() {
  local requirements=$1 py=$2
  "$py" - "$requirements" <<'PY'
import hashlib, re, sys
from pathlib import Path

def text(path, depth=0):
    body = Path(path).read_bytes()
    out = body
    for line in body.decode(errors="replace").splitlines():
        hit = re.match(r"^\s*(?:-[rc]|--requirement|--constraint)(?:\s+|=)?(\S+)", line)
        if hit and depth < 8:
            out += text(Path(path).parent / hit.group(1), depth + 1)
    return out

try:
    print(hashlib.sha256(text(sys.argv[1]) + sys.version.encode()).hexdigest())
except OSError:  # a list pip cannot read either: a digest no stamp holds, so pip runs and says why
    import uuid
    print(uuid.uuid4().hex)
PY
}
