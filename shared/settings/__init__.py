"""Settings of the queue, read from the environment (Azure app settings, or `local.settings.json` locally).

Every setting is an environment variable named `QUEUE_<FIELD>` in upper case; durations are seconds. They are
declared by concern, a module each (storage, serving, access, work, upkeep, artifacts, events), and read as one
`Settings`.
"""

from __future__ import annotations

import functools

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.errors import SettingsError
from shared.settings.access import DEFAULT_ANONYMOUS_SCOPES, AccessSettings
from shared.settings.artifacts import ArtifactSettings
from shared.settings.events import EventSettings
from shared.settings.serving import ServingSettings
from shared.settings.storage import StorageSettings
from shared.settings.upkeep import UpkeepSettings
from shared.settings.work import WorkSettings

ENV_PREFIX = "QUEUE_"


class Settings(
    StorageSettings,
    ServingSettings,
    AccessSettings,
    WorkSettings,
    UpkeepSettings,
    ArtifactSettings,
    EventSettings,
    BaseSettings,
):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True, populate_by_name=True)


def load_settings(**overrides: object) -> Settings:
    """Read the settings from the environment; a bad or missing value raises SettingsError naming it."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(part) for part in err["loc"])
            problems.append(f"{ENV_PREFIX}{field.upper()}: {err['msg']}" if field else err["msg"])
        raise SettingsError(problems="; ".join(problems)) from None


@functools.cache
def get_settings() -> Settings:
    """The process's settings, read once."""
    return load_settings()


__all__ = ["DEFAULT_ANONYMOUS_SCOPES", "ENV_PREFIX", "Settings", "get_settings", "load_settings"]
