"""Feedback: thumbs up or down on an answer, by the trace id the answer came back with."""

import asyncio

from fastapi import APIRouter, HTTPException

from gateway.deps import Sessions, Tenant
from ragkit.store import feedback
from schemas.gateway import FeedbackBody, FeedbackRecorded

router = APIRouter()


@router.post("/v1/feedback", response_model=FeedbackRecorded)
async def post_feedback(body: FeedbackBody, tenant: Tenant, sessions: Sessions) -> FeedbackRecorded:
    """Thumbs up or down on an answer, by the trace id it came back with. The latest vote
    counts."""
    try:
        replaced = await asyncio.to_thread(
            feedback.record, sessions, tenant, body.trace_id, body.rating, body.comment
        )
    except feedback.UnknownAnswer as exc:
        raise HTTPException(404, str(exc)) from exc
    return FeedbackRecorded(trace_id=body.trace_id, rating=body.rating, replaced=replaced)
