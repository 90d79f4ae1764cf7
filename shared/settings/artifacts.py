"""Artifacts: their container, how long their signed URLs work, the largest `s3` upload and how many stream at
once."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ArtifactSettings(BaseModel):
    artifact_container: str = Field(
        default="artifacts",
        pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$",
        description="Blob container of the artifacts.",
    )
    artifact_upload_ttl: float = Field(
        default=1800,
        gt=0,
        description="Seconds an artifact's upload URL (`putUrl`) works; ask createArtifact again for a fresh one.",
    )
    artifact_download_ttl: float = Field(
        default=1800, gt=0, description="Seconds a download URL given by getArtifact works."
    )
    artifact_s3_max_bytes: int = Field(
        default=5 * 1024**3,
        gt=0,
        le=190 * 1024**4,
        description="Largest `s3` artifact: its one PUT passes "
        "through the queue (default 5 GiB, S3's single-PUT limit; on Azure Functions the HTTP request limit is "
        "lower: docs/deploy.md).",
    )
    artifact_upload_slots: int = Field(
        default=8,
        ge=1,
        description="`s3` uploads a process streams to Blob "
        "Storage at once, each holding up to two 4 MiB blocks; others wait.",
    )
    artifact_exception_window: float = Field(
        default=1500,
        ge=0,
        description="Seconds after a run resolved "
        "`exception` during which artifacts may still be created "
        "(Taskcluster: 25 minutes).",
    )
