"""What every tool does with a bad argument or input: one line naming the tool and the problem on stderr
and exit status 1, never a traceback (``SGEMM_LAB_DEBUG=1`` shows it). Used as
``sys.exit(run(main, ...))`` at the bottom of each tool."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable


def run(main: Callable, *args) -> int:
    """``main(*args)``'s exit status; a failure is one line and status 1 (argparse's own usage errors keep
    their status 2)."""
    tool = Path(sys.argv[0]).name
    try:
        code = main(*args)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the whole point: one line, not a traceback
        if os.environ.get("SGEMM_LAB_DEBUG") == "1":
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, (KeyError, IndexError)):
            text = f"{type(exc).__name__} {text}"
        print(f"{tool}: {text[:300]} (SGEMM_LAB_DEBUG=1 shows where)", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0
