"""What keeps the queue tidy and whole: expiry, the reconciler, and the parking of long-delayed checks."""

from __future__ import annotations

from pydantic import BaseModel, Field


class UpkeepSettings(BaseModel):
    expiry_delay: float = Field(
        default=1800, ge=0, description="Seconds after `expires` at which a task is deleted (Taskcluster: 30 minutes)."
    )
    expiry_schedule: str = Field(
        default="0 */5 * * * *",
        description="NCRONTAB schedule of the expiry timer "
        "(an app setting the timer trigger's binding names as %QUEUE_EXPIRY_SCHEDULE%).",
    )
    reconcile_schedule: str = Field(
        default="30 */5 * * * *",
        description="NCRONTAB schedule of the reconciler "
        "(an app setting its binding names as %QUEUE_RECONCILE_SCHEDULE%).",
    )
    park_lead: int = Field(
        default=60,
        ge=1,
        description="Seconds before they fall due that claim checks and deadlines due later are brought from their "
        "parking queue, which no trigger watches, to their trigger's (shared/domain/parking.py).",
    )
    park_schedule: str = Field(
        default="*/20 * * * * *",
        description="NCRONTAB schedule of the timer that moves parked checks (%QUEUE_PARK_SCHEDULE%): within the lead.",
    )
    reconcile_grace: float = Field(
        default=300,
        gt=0,
        description="Seconds a state must have lasted before the "
        "reconciler judges that the message meant to move it on was lost.",
    )
    reconcile_budget: float = Field(default=120, gt=0, description="Seconds one reconciler pass may run.")
    rehint_after: float = Field(
        default=3600,
        gt=0,
        description="Seconds a run may wait pending in a queue "
        "that is not empty before the reconciler hints it again (its first hint stays "
        "valid, so it keeps its place).",
    )
