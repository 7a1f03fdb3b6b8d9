"""How a workflow's runs meet a new build (Worker Deployment Versioning; ARCHITECTURE.md,
*Versioned workers*): every workflow's behaviour and its reason, in one table.

All are pinned: a run finishes on the build it started on, so a change to a workflow needs no
`workflow.patched` for the runs already going, and a missed patch cannot stall them. The long
ones, conversations and ingests, do not hold an old build for ever: once a new build is current,
they continue as new at their next natural break (after a turn; between batches), and the next
run starts on the current build.

The table, not each `@workflow.defn`, carries the behaviour: a versioned worker applies it as
its default (`workers.build.deployment_config`). A behaviour on the decorator makes the server
refuse every task of an unversioned worker ("versioning behavior cannot be specified without
deployment options"), and the tests' in-process workers are unversioned. A workflow that should
auto-upgrade would need the decorator's, and so versioned test workers.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import VersioningBehavior

PINNED = VersioningBehavior.PINNED

# workflow type -> (behaviour, why); tests/workflows/test_versioning.py holds every workflow a
# worker runs, and ARCHITECTURE.md's table, to it.
BEHAVIOURS: dict[str, tuple[VersioningBehavior, str]] = {
    "AnswerWorkflow": (
        PINNED,
        "seconds long: it finishes on the code it started on, so a change to it needs no patch",
    ),
    "SearchWorkflow": (PINNED, "seconds long, as an answer"),
    "ConversationWorkflow": (
        PINNED,
        "open up to 15 minutes after its last turn: after the turn in progress it continues as "
        "new onto the current build",
    ),
    "IngestWorkflow": (
        PINNED,
        "hours long: between two batches it continues as new onto the current build",
    ),
    "CompactionWorkflow": (PINNED, "scheduled and short: each run starts on the current build"),
    "DeleteDocumentWorkflow": (
        PINNED,
        "a delete's steps (tombstone, purge, verify) run in the order of the code that began it",
    ),
    "ForgetDocumentWorkflow": (PINNED, "as a delete"),
    "DeleteTenantWorkflow": (PINNED, "as a delete"),
    "ForgetRunsWorkflow": (PINNED, "a bounded sweep"),
    "RebuildIndexWorkflow": (
        PINNED,
        "its phases (copy, verify, activate) must agree; its build's workers stay until it ends",
    ),
    "EvaluationWorkflow": (PINNED, "one report compares like with like, on one build"),
}

# What a versioned worker applies to its workflows: the one behaviour of the table.
WORKER_DEFAULT = PINNED

# continue_as_new's `initial_versioning_behavior`: the next run's first task goes to the current
# build (then it is pinned there, as its workflow is).
NEXT_RUN_ON_CURRENT_BUILD = workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE


def new_build_is_current() -> bool:
    """A build other than this run's has become current: a pinned long run's cue to continue as
    new. False on unversioned workers."""
    return workflow.info().is_target_worker_deployment_version_changed()
