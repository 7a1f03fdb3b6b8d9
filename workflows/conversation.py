"""ConversationWorkflow: one long-lived entity per conversation (R16, R17).

Id `conversation-<tenant>:<id>` (ragkit/ids.py). Each user message arrives as the `send` update, sent with
update-with-start, so the first message creates the workflow. Turns are applied strictly one at
a time (a lock; updates are delivered in the order they were accepted). Each turn:

  append the user turn (Postgres) -> the window: rolling summary + the most recent turns within
  the token budget -> AnswerWorkflow as a child, with that window -> append the assistant turn
  -> reply.

After the reply, once the verbatim turns pass their budget less a headroom (`fold_headroom`),
the oldest are folded into the summary (`summarize` on the summary model's LLM queue, then
`save_summary`) without holding the lock: the next turns go on meanwhile, in the headroom. A turn
that would still leave earlier turns out waits for the fold in flight, up to `fold_wait_seconds`,
so a working summarizer never costs a prompt its history. A failed summarization loses nothing:
the turns stay verbatim, the window trims the oldest that do not fit (`turns_dropped`), and
folding is tried again after the next turn. (Runs started before the headroom carry 0 for both,
and fold and trim as they did: their histories replay.)

The `cancel_turn` signal (the gateway sends it when the client leaves or times out) stops the
turn of one message id: a running turn cancels its AnswerWorkflow child (whose cancellation
reaches the engine), a turn still waiting for the lock is skipped when its turn comes, and
either way the `send` update fails with `TurnCancelled`. What stays stored: the user turn, when
it was already appended (the record shows what was asked), and no assistant turn, as when the
answer fails. A cancelled message id stays cancelled for this run: send a new one to ask again.

Postgres is the record; this workflow only caches it. It loads the summary and the turns after
it on its first turn, continues-as-new every `turns_per_run` turns (or when Temporal suggests
it), and closes after `idle_seconds` without a message: the next message starts it again from
Postgres. The `delete` update removes the conversation, its turns and summaries, and closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
)

with workflow.unsafe.imports_passed_through():
    from activities.history import HistoryActivities
    from activities.inference import InferenceActivities
    from ragkit import ids, policies
    from ragkit.memory import pin_facts, render_summary
    from ragkit.retrieval import estimate_tokens
    from schemas.answer import (
        Answer,
        AnswerPlan,
        AnswerWorkflowInput,
        AskRequest,
        ChatMessage,
        ConversationWindow,
    )
    from schemas.conversation import (
        DELETED_CONVERSATION,
        AppendTurnInput,
        ChatReply,
        ChatRequest,
        ChatUpdate,
        ConversationInput,
        ConversationKey,
        ConversationState,
        ForgetConversationInput,
        SaveSummaryInput,
        SummarizeInput,
        TurnMessage,
        TurnToCancel,
    )
    from schemas.maintenance import ForgetRunsInput
    from workflows.answer import AnswerWorkflow
    from workflows.calls import call, degrade, describe, policy_table
    from workflows.forget import ForgetRunsWorkflow
    from workflows.versioning import NEXT_RUN_ON_CURRENT_BUILD, new_build_is_current

# Chat-template tokens around each turn (role markers, separators).
TURN_OVERHEAD_TOKENS = 4
# The `send` update's failure type when the turn was stopped by `cancel_turn`.
TURN_CANCELLED = "TurnCancelled"
# workflow.patched ids: the branch taken by runs started after the change.
INJECTIVE_IDS = "injective-ids"
FORGET_ON_DELETE = "forget-on-delete"
TENANT_CHECKED_SIGNALS = "tenant-checked-signals"


def turn_tokens(turn: TurnMessage) -> int:
    return estimate_tokens(turn.text) + TURN_OVERHEAD_TOKENS


def ended_cancelled(child: asyncio.Task[Answer]) -> bool:
    """The child workflow ended cancelled (or its handle's wait was)."""
    if child.cancelled():
        return True
    error = child.exception()
    return isinstance(error, ChildWorkflowError) and isinstance(error.cause, CancelledError)


@workflow.defn
class ConversationWorkflow:
    @workflow.init
    def __init__(self, wf_input: ConversationInput) -> None:
        self.input = wf_input
        self.key = ConversationKey(tenant=wf_input.tenant, conversation_id=wf_input.conversation_id)
        self.lock = asyncio.Lock()
        self.loaded = False
        self.summary = ""  # the model's part of the rolling summary
        self.facts: list[str] = []  # the user's statements, pinned verbatim
        self.summarized_through = -1
        self.turns: list[TurnMessage] = []
        self.next_ordinal = 0
        self.turns_this_run = 0
        self.events = 0  # bumped by every update: restarts the idle clock
        self.summarizing = False
        self.summary_failures = 0
        self.retry_summary_after = -1  # after a failure, fold again once this turn exists
        self.closing = False
        self.cancelled: set[str] = set()  # message ids whose turn was stopped (cancel_turn)
        # A deleted document redacted some of this conversation's replies (`reload`): start a
        # new run from Postgres, so this run's history, which holds them, can be deleted.
        self.reload_requested = False
        self.answering: dict[str, workflow.ChildWorkflowHandle[AnswerWorkflow, Answer]] = {}

    @workflow.run
    async def run(self, wf_input: ConversationInput) -> None:
        window = wf_input.window
        while not self.closing:
            seen = self.events

            def woken(seen: int = seen) -> bool:
                return self.events != seen or self._summary_due() or self.closing

            try:
                await workflow.wait_condition(woken, timeout=timedelta(seconds=window.idle_seconds))
            except TimeoutError:
                if not self.lock.locked():
                    break  # idle: close; the next message starts again from Postgres
                continue
            if self._summary_due():
                await self._summarize()
            if (
                self.reload_requested
                or self.turns_this_run >= window.turns_per_run
                or workflow.info().is_continue_as_new_suggested()
                or new_build_is_current()
            ) and not self.closing:
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() and not self.summarizing
                )
                # The next run starts on the current build (this one is pinned to its own).
                workflow.continue_as_new(
                    wf_input, initial_versioning_behavior=NEXT_RUN_ON_CURRENT_BUILD
                )
        await workflow.wait_condition(workflow.all_handlers_finished)

    @workflow.update
    async def send(self, update: ChatUpdate) -> ChatReply:
        self.events += 1
        try:
            async with self.lock:
                return await self._turn(update)
        finally:
            self.events += 1

    @send.validator
    def _validate_send(self, update: ChatUpdate) -> None:
        request = update.request
        if not self._mine(request.tenant, request.conversation_id):
            raise ValueError("the message names another conversation than this workflow's")
        if self.closing:
            raise ValueError(DELETED_CONVERSATION)

    @workflow.signal
    def cancel_turn(self, turn: TurnToCancel | str) -> None:
        """Stop the turn of a message id: its answer is cancelled if it runs, or the turn is
        skipped if it still waits; its `send` fails with TurnCancelled. A turn already done,
        or an unknown id, is left alone. A signal that names another tenant's conversation is
        ignored (a signal cannot be refused)."""
        if isinstance(turn, str):
            # The bare message id signals carried before they named their conversation: kept
            # for runs that recorded one, ignored from then on (it proves no tenant).
            if workflow.patched(TENANT_CHECKED_SIGNALS):
                workflow.logger.warning("cancel_turn without its conversation ignored")
                return
            message_id = turn
        elif self._mine(turn.tenant, turn.conversation_id):
            message_id = turn.message_id
        else:
            workflow.logger.warning("cancel_turn for another conversation ignored")
            return
        self.cancelled.add(message_id)
        child = self.answering.get(message_id)
        if child is not None:
            child.cancel()

    @workflow.signal
    def reload(self, key: ConversationKey) -> None:
        """Continue as new once no turn is in flight, loading the conversation again from
        Postgres: a deleted document redacted replies this run still holds (DeleteDocumentWorkflow
        deletes this run once it has closed). Another conversation's signal is ignored."""
        if not self._mine(key.tenant, key.conversation_id):
            workflow.logger.warning("reload for another conversation ignored")
            return
        self.reload_requested = True
        self.events += 1

    @workflow.update
    async def delete(self, key: ConversationKey | None = None) -> int:
        """Remove the conversation, its turns and summaries; returns the turns removed. `key`
        names the conversation, tenant first: the validator refuses any other (runs recorded
        before it was required replay with none)."""
        self.events += 1
        async with self.lock:
            if workflow.patched(FORGET_ON_DELETE):
                removed = await self._forget()
            else:
                removed = await call(
                    HistoryActivities.delete_conversation,
                    self.key,
                    summary="delete the conversation, its turns and summaries",
                )
            self.closing = True
            self.turns, self.summary, self.facts = [], "", []
            return removed

    def _named(self) -> str:
        """What children and engine requests are named after: the conversation's id, from the
        input, not workflow.info(), so they never depend on how a run is named. Runs started
        before ids were injective keep the old form (their recorded children carry it)."""
        key = self.key
        if workflow.patched(INJECTIVE_IDS):
            return ids.conversation_workflow_id(key.tenant, key.conversation_id)
        return ids.legacy_conversation_workflow_id(key.tenant, key.conversation_id)

    async def _forget(self) -> int:
        """Delete the conversation and what its answers left in Postgres, then hand the runs
        whose histories carried its text to ForgetRunsWorkflow (abandoned, on the bulk queue),
        which deletes them once this run has closed. Returns the turns removed."""
        named = self._named()
        forgot = await call(
            HistoryActivities.forget_conversation,
            ForgetConversationInput(key=self.key, answers_named=named),
            summary="delete the conversation, its turns, summaries and what its answers left",
        )
        answers = sorted(
            {ids.turn_answer_workflow_id(named, o) for o in forgot.user_ordinals}
            | set(forgot.answer_trace_ids)
        )
        own = workflow.info()
        await workflow.start_child_workflow(
            ForgetRunsWorkflow.run,
            ForgetRunsInput(
                workflow_ids=[*answers, *map(ids.shadow_workflow_id, answers), own.workflow_id],
                wait_for=own.workflow_id,
                started_before=workflow.now(),
            ),
            id=ids.forget_workflow_id(own.workflow_id, own.run_id),
            task_queue=policy_table().queue_name(policies.Queue.WORKFLOW),
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            static_summary=f"delete the runs of a deleted conversation ({len(answers)} answers)",
        )
        return forgot.turns_removed

    @delete.validator
    def _validate_delete(self, key: ConversationKey | None = None) -> None:
        if key is None or not self._mine(key.tenant, key.conversation_id):
            raise ValueError("the delete names another conversation than this workflow's")
        if self.closing:
            raise ValueError(DELETED_CONVERSATION)

    def _mine(self, tenant: str, conversation_id: str) -> bool:
        return (tenant, conversation_id) == (self.key.tenant, self.key.conversation_id)

    @workflow.query
    def state(self, key: ConversationKey) -> ConversationState:
        """The conversation's state, for the caller that names it (tenant first)."""
        if not self._mine(key.tenant, key.conversation_id):
            raise ValueError("the query names another conversation than this workflow's")
        return ConversationState(
            next_ordinal=self.next_ordinal,
            summary=render_summary(self.facts, self.summary),
            summarized_through=self.summarized_through,
            window_turns=len(self.turns),
            turns_this_run=self.turns_this_run,
            summarizing=self.summarizing,
            summary_failures=self.summary_failures,
        )

    # --- one turn -------------------------------------------------------------------------------

    async def _turn(self, update: ChatUpdate) -> ChatReply:
        request = update.request
        self._unless_cancelled(request.message_id)
        await self._load()
        user = TurnMessage(ordinal=self.next_ordinal, role="user", text=request.message)
        await call(
            HistoryActivities.append_turn,
            AppendTurnInput(
                **self.key.model_dump(),
                ordinal=user.ordinal,
                role="user",
                text=user.text,
                message_id=request.message_id,
            ),
            summary=f"store turn {user.ordinal} (user)",
        )
        self.next_ordinal += 1
        history, dropped = self._window()
        wait = self.input.window.fold_wait_seconds
        if dropped and wait > 0 and self._folding():
            # Folding makes room for the turns this prompt would leave out: the fold in flight,
            # and the next one when turns came faster than it (a cancel ends the wait). A few
            # seconds' wait beats a prompt that forgot them.
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: (
                        request.message_id in self.cancelled
                        or not self._window()[1]
                        or not self._folding()
                    ),
                    timeout=timedelta(seconds=wait),
                )
            history, dropped = self._window()
        self.turns.append(user)

        answer = await self._answer(request, user.ordinal, history)
        if dropped:
            degradations = list(answer.degradations)
            degrade(
                degradations,
                "turns_dropped",
                f"{dropped} earlier turn(s) left out of the prompt to fit its budget",
            )
            answer = answer.model_copy(update={"degradations": degradations})

        reply = TurnMessage(ordinal=self.next_ordinal, role="assistant", text=answer.answer)
        await call(
            HistoryActivities.append_turn,
            AppendTurnInput(
                **self.key.model_dump(),
                ordinal=reply.ordinal,
                role="assistant",
                text=reply.text,
                citations=answer.citations,
                prompt_tokens=answer.tokens.prompt,
                completion_tokens=answer.tokens.completion,
                trace_id=answer.trace_id,
                model=answer.model,
                degradations=answer.degradations,
            ),
            summary=f"store turn {reply.ordinal} (assistant)",
        )
        self.next_ordinal += 1
        self.turns.append(reply)
        self.turns_this_run += 1
        return ChatReply(
            conversation_id=request.conversation_id,
            turn=reply.ordinal,
            answer=answer,
            summarized_through=self.summarized_through,
            history_turns=len(history.turns),
            history_tokens=estimate_tokens(history.summary)
            + sum(estimate_tokens(t.content) + TURN_OVERHEAD_TOKENS for t in history.turns),
            history_dropped=dropped,
        )

    def _unless_cancelled(self, message_id: str) -> None:
        if message_id in self.cancelled:
            raise ApplicationError(
                f"the turn of message {message_id!r} was cancelled",
                type=TURN_CANCELLED,
                non_retryable=True,
            )

    def _plan_for(self, request: ChatRequest) -> AnswerPlan:
        """The conversation's plan, with the model and passages' budget the message was sent
        with (a swap, or a worker serving another context, reaches running conversations)."""
        update: dict[str, object] = {}
        if request.model:
            update["model"] = request.model
        if request.context_tokens:
            update["context_tokens"] = request.context_tokens
        return self.input.plan.model_copy(update=update) if update else self.input.plan

    async def _answer(
        self, request: ChatRequest, ordinal: int, history: ConversationWindow
    ) -> Answer:
        """The turn's AnswerWorkflow child; TurnCancelled when cancel_turn stopped it. The same
        commands as execute_child_workflow: start the child, then wait for its result."""
        self._unless_cancelled(request.message_id)  # cancelled while the user turn was stored
        child = await workflow.start_child_workflow(
            AnswerWorkflow.run,
            AnswerWorkflowInput(
                request=AskRequest(
                    tenant=request.tenant,
                    question=request.message,
                    conversation_id=request.conversation_id,
                    top_k=request.top_k,
                    max_answer_tokens=request.max_answer_tokens,
                ),
                plan=self._plan_for(request),
                history=history,
                stream_id=request.stream_id,
            ),
            id=ids.turn_answer_workflow_id(self._named(), ordinal),
            # The conversation's own (live, short) task timeout: a lost task of the turn's
            # answer is redelivered as soon as the conversation's would be.
            task_timeout=workflow.info().task_timeout,
            static_summary=f"answer turn {ordinal}: {request.message[:60]}",
            memo={"tenant": request.tenant},
        )
        self.answering[request.message_id] = child
        if request.message_id in self.cancelled:  # cancelled while the child was starting
            child.cancel()
        try:
            # Waited on, not awaited: the child's cancellation must not cancel this handler.
            await workflow.wait([child])
        except asyncio.CancelledError:
            child.cancel()  # this handler cancelled: the child with it, as when awaited
            raise
        finally:
            del self.answering[request.message_id]
        if request.message_id in self.cancelled and ended_cancelled(child):
            self._unless_cancelled(request.message_id)
        return child.result()  # the answer (it may have beaten the cancel), or its failure

    async def _load(self) -> None:
        if self.loaded:
            return
        stored = await call(
            HistoryActivities.load_conversation,
            self.key,
            summary="load the summary and recent turns from Postgres",
        )
        self.summary, self.summarized_through = stored.summary, stored.summarized_through
        self.facts = list(stored.facts)
        self.turns, self.next_ordinal = list(stored.turns), stored.next_ordinal
        self.loaded = True

    def _window(self) -> tuple[ConversationWindow, int]:
        """The summary plus the newest turns that fit the history budget; oldest left out first."""
        summary = render_summary(self.facts, self.summary)
        left = self.input.window.history_tokens - estimate_tokens(summary)
        kept: list[TurnMessage] = []
        for turn in reversed(self.turns):
            cost = turn_tokens(turn)
            if cost > left:
                break
            kept.insert(0, turn)
            left -= cost
        messages = [ChatMessage(role=t.role, content=t.text) for t in kept]
        return ConversationWindow(summary=summary, turns=messages), len(self.turns) - len(kept)

    # --- summarization --------------------------------------------------------------------------

    def _verbatim_budget(self) -> int:
        window = self.input.window
        return window.history_tokens - window.summary_tokens

    def _folding(self) -> bool:
        """A fold runs, or the run loop is about to start one."""
        return self.summarizing or self._summary_due()

    def _summary_due(self) -> bool:
        """Once the verbatim turns pass their budget less the headroom, which the turns that
        arrive while the model summarizes use."""
        budget = self._verbatim_budget()
        return (
            not self.summarizing
            and not self.closing
            and len(self.turns) > 2
            and self.next_ordinal > self.retry_summary_after
            and sum(turn_tokens(t) for t in self.turns)
            > budget - int(budget * self.input.window.fold_headroom)
        )

    async def _summarize(self) -> None:
        """Fold the oldest turns, keeping the newest within half the verbatim budget (so folding
        happens every few turns, not every turn) and at least the last exchange."""
        keep, used = 0, 0
        for turn in reversed(self.turns):
            if keep >= 2 and used + turn_tokens(turn) > self._verbatim_budget() // 2:
                break
            keep, used = keep + 1, used + turn_tokens(turn)
        fold = self.turns[: len(self.turns) - keep]
        if not fold:
            return
        self.summarizing = True
        window = self.input.window
        # Half the summary budget at most for pinned statements; the model gets what is left.
        facts = pin_facts(
            self.facts,
            [t.text for t in fold if t.role == "user"],
            window.summary_tokens // 2,
            estimate_tokens,
        )
        model_tokens = window.summary_tokens - sum(estimate_tokens(f) for f in facts)
        try:
            folded = await call(
                InferenceActivities.summarize,
                SummarizeInput(
                    trace_id=ids.summary_trace_id(self._named(), fold[-1].ordinal),
                    previous_summary=self.summary,
                    turns=fold,
                    max_tokens=max(16, model_tokens),
                ),
                summary=f"fold turns {fold[0].ordinal}-{fold[-1].ordinal} into the summary",
                task_queue=policies.llm_queue(window.summary_model),
            )
            if not folded.summary.strip():
                raise ValueError("the model returned an empty summary")
            through = fold[-1].ordinal
            await call(
                HistoryActivities.save_summary,
                SaveSummaryInput(
                    **self.key.model_dump(),
                    summary=folded.summary,
                    facts=facts,
                    summarized_through=through,
                ),
                summary=f"save the summary through turn {through}",
            )
        except (ActivityError, ValueError) as err:
            reason = describe(err) if isinstance(err, ActivityError) else str(err)
            workflow.logger.warning("summarization failed, turns kept verbatim: %s", reason)
            self.summary_failures += 1
            self.retry_summary_after = self.next_ordinal
        else:
            # Turns that arrived meanwhile stay; only the folded ones leave the window.
            self.summary, self.summarized_through = folded.summary, through
            self.facts = facts
            self.turns = [t for t in self.turns if t.ordinal > through]
        finally:
            self.summarizing = False
