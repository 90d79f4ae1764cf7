"""What `make run` keeps in its data dir (QUEUE_DATA_DIR, default .data/): the secrets it generated once, the form of
what it wrote (refused by an older release that cannot read it), and where the running storage is, so that the
other commands find it; and local.settings.json's values, read into the environment as the Functions host does."""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

from local_host import azurite
from local_host.host import PROJECT
from shared import __version__
from shared.connections import StorageConnection
from shared.errors import SettingsError


def load_local_settings(path: Path) -> None:
    """Put `Values` of local.settings.json into the environment; variables already set win."""
    if not path.exists():
        return
    values = json.loads(path.read_text()).get("Values", {})
    for name, value in values.items():
        os.environ.setdefault(name, str(value))


AZURITE_KEY = "AZURITE_ACCOUNT_KEY"  # in secrets.json: the embedded Azurite's account key


def ensure_secrets(data_dir: Path, *, azurite_key: bool = False) -> bool:
    """Make sure the root access token and the client-token secret are set; generate them once (kept in the
    data dir, readable by its owner only) when the environment does not set them, and with `azurite_key` the
    embedded Azurite's account key too. True if the root access token was generated now."""
    stored = data_dir / "secrets.json"
    kept = json.loads(stored.read_text()) if stored.exists() else {}
    generated = False
    for variable in ("QUEUE_ROOT_ACCESS_TOKEN", "QUEUE_TOKEN_SECRET"):
        if os.environ.get(variable):
            continue
        if variable not in kept:
            kept[variable] = secrets.token_urlsafe(33)
            generated = generated or variable == "QUEUE_ROOT_ACCESS_TOKEN"
        os.environ[variable] = kept[variable]
    if azurite_key and AZURITE_KEY not in kept:
        kept[AZURITE_KEY] = azurite.generate_key()
    if kept:
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
        stored.write_text(json.dumps(kept))
        stored.chmod(0o600)
    return generated


def data_dir_path() -> Path:
    data_dir = Path(os.environ.get("QUEUE_DATA_DIR") or PROJECT / ".data")
    return data_dir if data_dir.is_absolute() else PROJECT / data_dir


# The form of what a `make run` data dir holds (Azurite's files, as this release's patched Azurite writes them, and
# the secrets): raised when a release writes a form the previous one cannot read, so that the previous one refuses
# the data dir with one line rather than crash on it (docs/deploy.md#releases-upgrades-and-rollbacks).
DATA_FORMAT = 1
FORMAT_FILE = "format.json"


class DataDirTooNew(SettingsError):
    """The data dir {path} was written by tc-azure-queue {written_by} in data format {found}; this release
    ({version}) reads format {known} and older. Run that release (or a newer one) on it, or give this one another
    QUEUE_DATA_DIR"""


def check_data_format(data_dir: Path) -> None:
    """Refuse a data dir written in a newer form than this release reads; record this release's form in it."""
    marker = data_dir / FORMAT_FILE
    try:
        found = json.loads(marker.read_text())
    except FileNotFoundError:
        found = {}  # a new data dir, or one from before the marker (format 1)
    except ValueError:
        found = {"dataFormat": DATA_FORMAT + 1, "writtenBy": "an unknown release (unreadable format.json)"}
    if int(found.get("dataFormat", 1)) > DATA_FORMAT:
        raise DataDirTooNew(
            path=str(data_dir),
            written_by=found.get("writtenBy", "?"),
            found=found.get("dataFormat"),
            version=__version__,
            known=DATA_FORMAT,
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"dataFormat": DATA_FORMAT, "writtenBy": __version__}) + "\n")


def running_storage() -> bool:
    """Point at the queue's storage: $QUEUE_STORAGE, or the running `make run`'s (and its secrets)."""
    data_dir = data_dir_path()
    runtime = data_dir / "runtime.json"
    configured = StorageConnection.from_environ("QUEUE_STORAGE", os.environ) is not None
    if not configured and runtime.exists():
        os.environ["QUEUE_STORAGE"] = json.loads(runtime.read_text())["QUEUE_STORAGE"]
        configured = True
    if not configured:
        print("error: set QUEUE_STORAGE, or start `make run` first", file=sys.stderr)
        return False
    if (data_dir / "secrets.json").exists():
        ensure_secrets(data_dir)  # the secrets `make run` generated, unless the environment sets them
    return True
