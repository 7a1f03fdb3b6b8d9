"""EvaluationWorkflow (R25): a case set through the real answer flow, scored and stored.

Each case is an AnswerWorkflow child (`<this id>-<case id>`), at most `concurrency` at a time. A
case that fails is scored as zero and named in the report; the run goes on. The metrics are
computed here (pure, `ragkit/scoring.py`); the report is stored by a local activity.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.evaluation import EvaluationActivities
    from ragkit import ids
    from ragkit.scoring import metrics
    from ragkit.sources import Source
    from schemas.answer import AnswerWorkflowInput, AskRequest
    from schemas.evaluation import CaseOutcome, EvalCase, EvalInput, EvalReport, StoreEvalInput
    from workflows.answer import AnswerWorkflow
    from workflows.calls import call


@workflow.defn
class EvaluationWorkflow:
    @workflow.run
    async def run(self, request: EvalInput) -> EvalReport:
        run_id = workflow.info().workflow_id
        slots = asyncio.Semaphore(request.concurrency)

        async def one(case: EvalCase) -> CaseOutcome:
            async with slots:
                started = workflow.time()
                try:
                    answer = await workflow.execute_child_workflow(
                        AnswerWorkflow.run,
                        AnswerWorkflowInput(
                            request=AskRequest(
                                tenant=request.tenant,
                                question=case.question,
                                top_k=request.top_k,
                                max_answer_tokens=request.max_answer_tokens,
                            ),
                            plan=request.plan,
                        ),
                        id=ids.eval_case_workflow_id(run_id, case.id),
                        static_summary=f"eval case {case.id}: {case.question[:60]}",
                        memo={"tenant": request.tenant},
                    )
                except ChildWorkflowError as err:
                    return CaseOutcome(
                        case_id=case.id,
                        kind=case.kind,
                        trace_id=ids.eval_case_workflow_id(run_id, case.id),
                        retrieved=[],
                        cited=[],
                        answer="",
                        latency_ms=round((workflow.time() - started) * 1000, 1),
                        error=str(err.cause or err)[:500],
                    )
            return CaseOutcome(
                case_id=case.id,
                kind=case.kind,
                trace_id=answer.trace_id,
                # dict.fromkeys: no repeats, first occurrence (best rank) first.
                retrieved=list(dict.fromkeys(document(p.source) for p in answer.context)),
                cited=list(dict.fromkeys(document(c.source) for c in answer.citations)),
                answer=answer.answer,
                latency_ms=round(sum(answer.timings_ms.values()), 1),
            )

        outcomes = list(await asyncio.gather(*(one(case) for case in request.cases)))
        report = EvalReport(
            workflow_id=run_id,
            set_name=request.set_name,
            metrics=metrics(request.cases, outcomes),
            outcomes=outcomes,
        )
        await call(
            EvaluationActivities.store_eval_report,
            StoreEvalInput(report=report, tenant=request.tenant),
            summary=f"store the report of {request.set_name}",
        )
        return report


def document(source: str) -> str:
    """A source's file name: the label evaluation sets use."""
    return Source.parse(source).file_name
