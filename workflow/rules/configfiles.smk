# The config files read strictly before Snakemake reads them: a YAML syntax error or a key given twice
# is one line with the file, line and column (Snakemake's own reader names neither, and keeps the last
# of two equal keys). The files, in the order Snakemake merges them, name the file of a refused key
# (common.smk). An overlay (--configfile) that is not YAML at all is refused by Snakemake itself
# before the workflow starts.
import sys
from pathlib import Path

# the package is used from the checkout (scripts add the same directory to their own path)
SRC = str(Path(workflow.basedir) / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from sgemm_lab.config.files import read as read_config_file
from sgemm_lab.errors import ConfigError

BASE_CONFIG = "config/config.yaml"


def _config_files():
    settings = getattr(workflow, "config_settings", None)
    overlays = [str(p) for p in getattr(settings, "configfiles", None) or []]
    try:
        base = [(BASE_CONFIG, read_config_file(BASE_CONFIG))] if Path(BASE_CONFIG).exists() else []
        return base + [(p, read_config_file(p)) for p in overlays]
    except ConfigError as exc:
        raise WorkflowError(f"invalid configuration: {exc}")


CONFIG_FILES = _config_files()
COMMAND_LINE_CONFIG = dict(getattr(getattr(workflow, "config_settings", None), "config", None) or {})
