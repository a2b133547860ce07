//! Structured calls on [`HarnessAgent`] (part of the composition root: it joins the agent
//! and the structured-output capability, whose call marker the capability reads).

use crate::HarnessAgent;
use crate::structured::{OutputSchema, StructuredCall, StructuredError, StructuredReply};
use harness_core::{AgentInput, AgentStream, EventSink, RuntimeContext};

impl HarnessAgent {
    /// Runs one turn whose final answer must match `schema` (see the [module
    /// docs](crate::structured)), and returns it parsed and validated.
    ///
    /// # Errors
    /// [`StructuredError::NotCompliant`] when the answers did not match after the repair
    /// asks; [`StructuredError::Agent`] for every failure [`call`](Self::call) has.
    pub async fn call_structured(
        &self,
        input: impl Into<AgentInput>,
        schema: &OutputSchema,
        ctx: RuntimeContext,
    ) -> Result<StructuredReply, StructuredError> {
        self.call_structured_with_events(input, schema, ctx, EventSink::disabled())
            .await
    }

    /// [`call_structured`](Self::call_structured), sending the turn's events to `events`
    /// like [`call_with_events`](Self::call_with_events).
    ///
    /// # Errors
    /// Those of [`call_structured`](Self::call_structured).
    pub async fn call_structured_with_events(
        &self,
        input: impl Into<AgentInput>,
        schema: &OutputSchema,
        mut ctx: RuntimeContext,
        events: EventSink,
    ) -> Result<StructuredReply, StructuredError> {
        ctx.insert(StructuredCall(schema.clone()));
        let message = self
            .call_with_events(input, ctx, events)
            .await
            .map_err(StructuredError::from_agent)?;
        // A turn ends on a reply with tool calls only when they wait for a person.
        if message.has_tool_calls() {
            return Err(StructuredError::AwaitingApproval {
                message: Box::new(message),
            });
        }
        // The capability checked it; checked again here, so nothing but a valid value is
        // ever returned (a middleware of the caller's could have replaced the answer).
        let value = schema
            .parse(&message.text())
            .map_err(|error| StructuredError::NotCompliant { attempts: 1, error })?;
        Ok(StructuredReply::new(value, message))
    }

    /// [`call_structured`](Self::call_structured), yielding the turn's events like
    /// [`stream`](Self::stream): the `Final` message's text is the valid answer's JSON, and
    /// a turn whose answers never matched ends with an `Error` event.
    pub fn stream_structured(
        &self,
        input: impl Into<AgentInput>,
        schema: &OutputSchema,
        mut ctx: RuntimeContext,
    ) -> AgentStream {
        ctx.insert(StructuredCall(schema.clone()));
        self.stream(input, ctx)
    }
}
