//! Push-back: before each reasoning step, finished background results of the session that
//! the model has not received are appended as one `<system-reminder>` message, and marked
//! delivered in the same compare-and-set write, so a retry, a crash or a second process
//! never delivers one twice. Also starts the call's spawn counters (fan-out per step,
//! spawns per call) and turns tasks whose runner is gone into `lost`.

use super::limits::SpawnCounter;
use super::records::{TaskRecord, TaskStore};
use super::runtime::Runtime;
use super::task::now_ms;
use harness_core::{AgentError, Hooks, Middleware, Msg, ReasoningNext, Turn, async_trait};
use harness_fs::{CallScope, CallWorkspace, WriteMode, WsPath};
use std::sync::Arc;

/// Characters of a result shown inline; a longer one is written to a file and previewed.
pub(crate) const INLINE_RESULT_CHARS: usize = 2_000;

/// The middleware.
pub(crate) struct PushBack {
    runtime: Arc<Runtime>,
}

impl PushBack {
    pub(crate) fn new(runtime: Arc<Runtime>) -> Self {
        Self { runtime }
    }
}

#[async_trait]
impl Middleware for PushBack {
    fn name(&self) -> &'static str {
        "subagents"
    }

    fn hooks(&self) -> Hooks {
        Hooks::REASONING
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let first = match turn.ctx().get::<Arc<SpawnCounter>>() {
            Some(counter) => {
                counter.begin_step(turn.step());
                false
            }
            None => {
                let counter = Arc::new(SpawnCounter::default());
                counter.begin_step(turn.step());
                turn.ctx_mut().insert(counter);
                true
            }
        };
        if let Ok(store) = Runtime::store_for(turn.ctx())
            && (first || self.runtime.has_tasks_for(store.path()))
            // The unused path: a session without a task file has nothing to deliver or
            // sweep; a metadata check spares the read (a blocking-pool hand-off) per call.
            // An unreadable check falls through to the read, which reports it.
            && store.exists().await.unwrap_or(true)
        {
            match self.collect(&store).await {
                Ok(records) if !records.is_empty() => {
                    let text = self.reminder(turn.ctx(), &records).await;
                    turn.push(Msg::user(text));
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %harness_core::error_chain(&err), "background results not delivered");
                }
            }
        }
        next.run(turn).await
    }
}

impl PushBack {
    /// Sweeps lost tasks and takes the finished, undelivered ones, marking them delivered.
    async fn collect(&self, store: &TaskStore) -> Result<Vec<TaskRecord>, super::TaskStoreError> {
        let now = now_ms();
        store
            .update(|file| {
                let mut changed = false;
                let mut taken = Vec::new();
                for record in file.tasks.values_mut() {
                    changed |= self.runtime.sweep_lost(record, now);
                    if record.status.is_terminal() && !record.delivered {
                        record.delivered = true;
                        changed = true;
                        taken.push(record.clone());
                    }
                }
                (changed, taken)
            })
            .await
    }

    /// The reminder text; long results go to a file under the caller's large-results
    /// directory with a preview.
    async fn reminder(&self, ctx: &harness_core::RuntimeContext, records: &[TaskRecord]) -> String {
        let mut text = String::from("<system-reminder>\nBackground tasks delivered:\n");
        for record in records {
            let result = record.result.clone().unwrap_or_default();
            let shown = bounded(ctx, record, &result).await;
            text.push_str(&format!(
                "\n- task_id: {}\n  agent: {}\n  status: {}\n  result:\n{}\n",
                record.task_id,
                record.agent_id,
                record.status.as_str(),
                shown
            ));
        }
        text.push_str("</system-reminder>");
        text
    }
}

/// `result` as shown to the model: whole when short; else written to
/// `large_tool_results/<agent>/<task_id>.txt` and previewed with the path.
pub(crate) async fn bounded(ctx: &harness_core::RuntimeContext, record: &TaskRecord, result: &str) -> String {
    if result.chars().count() <= INLINE_RESULT_CHARS {
        return result.to_owned();
    }
    let preview: String = result.chars().take(INLINE_RESULT_CHARS).collect();
    let (Some(scope), Some(workspace)) = (ctx.get::<CallScope>(), ctx.get::<CallWorkspace>()) else {
        return format!(
            "{preview}\n[... result truncated: {} characters in all]",
            result.chars().count()
        );
    };
    let path = scope
        .large_tool_results_dir()
        .join(&format!("{}.txt", record.task_id))
        .unwrap_or_else(|_| WsPath::root());
    match workspace
        .user
        .write(&path, result.as_bytes(), WriteMode::Overwrite)
        .await
    {
        Ok(()) => format!(
            "{preview}\n[... {} characters in all; the whole result is in `{path}` (read it with read_file)]",
            result.chars().count()
        ),
        Err(err) => {
            tracing::warn!(error = %err, "long task result not written");
            format!(
                "{preview}\n[... result truncated: {} characters in all]",
                result.chars().count()
            )
        }
    }
}
