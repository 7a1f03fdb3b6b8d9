"""Which build a worker runs: its Worker Deployment Version in Temporal (ARCHITECTURE.md,
*Versioned workers*). The build id is the tree's (`ragkit.deployments.computed_build_id`), or
`DURABLE_RAG_WORKER_BUILD_ID` for images tagged otherwise.
"""

from __future__ import annotations

from temporalio.common import WorkerDeploymentVersion
from temporalio.worker import WorkerDeploymentConfig

from ragkit import deployments
from ragkit.settings import Settings
from workflows.versioning import WORKER_DEFAULT


def build_id(settings: Settings) -> str:
    return settings.worker.build_id or deployments.computed_build_id()


def deployment_name(settings: Settings, kind: str) -> str:
    return deployments.deployment_name(settings.worker.deployment_name, kind)


def deployment_version(settings: Settings, kind: str) -> WorkerDeploymentVersion:
    return WorkerDeploymentVersion(deployment_name(settings, kind), build_id(settings))


def deployment_config(settings: Settings, kind: str) -> WorkerDeploymentConfig | None:
    """The worker's deployment version where versioning is on (`DURABLE_RAG_WORKER_VERSIONING`,
    the default); None: an unversioned worker, as tests build theirs in-process."""
    if not settings.worker.versioning:
        return None
    return WorkerDeploymentConfig(
        version=deployment_version(settings, kind),
        use_worker_versioning=True,
        # Every workflow's behaviour (workflows/versioning.py): pinned.
        default_versioning_behavior=WORKER_DEFAULT,
    )
