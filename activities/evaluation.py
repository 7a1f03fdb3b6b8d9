"""Evaluation reports in Postgres (R25): every run of a set, comparable over time."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity

from ragkit.db import EvalReportRow
from schemas.evaluation import StoreEvalInput


class EvaluationActivities:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    @activity.defn
    def store_eval_report(self, request: StoreEvalInput) -> None:
        """One row per evaluation run; a retry overwrites it."""
        report = request.report
        with self.sessions.begin() as session:
            session.merge(
                EvalReportRow(
                    workflow_id=report.workflow_id,
                    set_name=report.set_name,
                    tenant=request.tenant or "",
                    metrics=report.metrics.model_dump(),
                    outcomes=[o.model_dump() for o in report.outcomes],
                )
            )
