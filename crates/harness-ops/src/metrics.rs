//! Prometheus metrics derived from the kernel's GenAI spans ([`MetricsLayer`], a `tracing`
//! layer: nothing in the loop counts anything itself) and rendered in the text exposition
//! format ([`Metrics::render`]) by `harness serve`'s `/metrics`.
//!
//! Series (labels never carry a user or session id):
//!
//! | series | type | labels |
//! |---|---|---|
//! | `harness_turns_total` | counter | `agent`, `outcome` (`ok` or the error kind) |
//! | `harness_turn_duration_seconds` | histogram | `agent` |
//! | `harness_model_call_duration_seconds` | histogram | `provider`, `model` |
//! | `harness_model_calls_total` | counter | `provider`, `model`, `outcome` |
//! | `harness_tokens_total` | counter | `provider`, `model`, `kind` (`input`, `output`, `cache_read`) |
//! | `harness_tool_calls_total` | counter | `tool`, `outcome` (`ok`, `error`) |
//!
//! Gauges of the server (queue depth, approvals pending, active sandboxes, background tasks
//! by state) are added by the caller at render time ([`Gauge`], [`GaugeSource`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Instant;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Histogram bucket bounds, seconds (model calls and turns: tens of milliseconds to minutes).
const BUCKETS: &[f64] = &[
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (bound, count) in BUCKETS.iter().zip(self.counts.iter_mut()) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }
}

#[derive(Debug, Default)]
struct Series {
    counters: BTreeMap<&'static str, BTreeMap<Labels, u64>>,
    histograms: BTreeMap<&'static str, BTreeMap<Labels, Histogram>>,
}

/// The process's metric values.
#[derive(Debug, Default)]
pub struct Metrics {
    series: Mutex<Series>,
}

/// A gauge value the caller adds to a rendering (e.g. the server's queue depth).
#[derive(Debug, Clone)]
pub struct Gauge {
    /// Series name, e.g. `harness_queue_depth`.
    pub name: &'static str,
    /// `# HELP` text.
    pub help: &'static str,
    /// Labels and value of each sample.
    pub samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

/// Gauges read when `/metrics` is rendered, from what the process does not hold itself (the
/// workspace's task records in the shared store).
#[harness_core::async_trait]
pub trait GaugeSource: Send + Sync {
    /// The gauges now; a source that cannot read its backend returns none (and logs why).
    async fn gauges(&self) -> Vec<Gauge>;
}

/// `harness_background_tasks{state}` (every status, 0 included) and
/// `harness_approvals_pending{kind="task"}` from the workspace's task records.
#[harness_core::async_trait]
impl GaugeSource for crate::Maintenance {
    async fn gauges(&self) -> Vec<Gauge> {
        let census = match self.task_census().await {
            Ok(census) => census,
            Err(err) => {
                tracing::warn!(error = %harness_core::error_chain(&err), "metrics: reading the task records failed");
                return Vec::new();
            }
        };
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let tasks = Gauge {
            name: "harness_background_tasks",
            help: "Background subagent tasks by state, from the task records of the workspace's store.",
            samples: census
                .by_state
                .into_iter()
                .map(|(state, count)| (vec![("state", state)], count as f64))
                .collect(),
        };
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let pending = census.pending_calls as f64;
        vec![
            tasks,
            Gauge {
                name: "harness_approvals_pending",
                help: "Tool calls waiting for a person: of sessions whose turn this server ran (kind=session), of background tasks (kind=task).",
                samples: vec![(vec![("kind", "task".to_owned())], pending)],
            },
        ]
    }
}

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::default);

const HELP: &[(&str, &str)] = &[
    (
        "harness_turns_total",
        "Agent turns (invoke_agent spans) by agent and outcome.",
    ),
    ("harness_turn_duration_seconds", "Duration of agent turns."),
    (
        "harness_model_calls_total",
        "Model calls by provider, model and outcome.",
    ),
    ("harness_model_call_duration_seconds", "Duration of model calls."),
    (
        "harness_tokens_total",
        "Tokens reported by the provider, by kind (input, output, cache_read).",
    ),
    ("harness_tool_calls_total", "Tool calls by tool and outcome."),
];

impl Metrics {
    /// The process's metrics (what [`MetricsLayer`] records into).
    pub fn global() -> &'static Metrics {
        &GLOBAL
    }

    fn series(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, name: &'static str, labels: Labels, by: u64) {
        *self
            .series()
            .counters
            .entry(name)
            .or_default()
            .entry(labels)
            .or_default() += by;
    }

    fn observe(&self, name: &'static str, labels: Labels, seconds: f64) {
        self.series()
            .histograms
            .entry(name)
            .or_default()
            .entry(labels)
            .or_default()
            .observe(seconds);
    }

    /// The text exposition format (version 0.0.4) of every series, then `gauges`.
    pub fn render(&self, gauges: &[Gauge]) -> String {
        let series = self.series();
        let mut out = String::new();
        let help = |name: &str| HELP.iter().find(|(n, _)| *n == name).map_or("", |(_, h)| *h);
        for (name, samples) in &series.counters {
            let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} counter", help(name));
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{} {value}", label_text(labels, None));
            }
        }
        for (name, samples) in &series.histograms {
            let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} histogram", help(name));
            for (labels, histogram) in samples {
                for (bound, count) in BUCKETS.iter().zip(&histogram.counts) {
                    let le = bound.to_string();
                    let _ = writeln!(out, "{name}_bucket{} {count}", label_text(labels, Some(&le)));
                }
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    label_text(labels, Some("+Inf")),
                    histogram.count
                );
                let _ = writeln!(out, "{name}_sum{} {}", label_text(labels, None), histogram.sum);
                let _ = writeln!(out, "{name}_count{} {}", label_text(labels, None), histogram.count);
            }
        }
        // Gauges of one name (from several sources) are one family: one HELP and TYPE.
        let mut names: Vec<&'static str> = Vec::new();
        for gauge in gauges {
            if !names.contains(&gauge.name) {
                names.push(gauge.name);
            }
        }
        for name in names {
            let mut parts = gauges.iter().filter(|gauge| gauge.name == name);
            let help = parts.clone().next().map_or("", |gauge| gauge.help);
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for gauge in parts.by_ref() {
                for (labels, value) in &gauge.samples {
                    let _ = writeln!(out, "{name}{} {value}", label_text(labels, None));
                }
            }
        }
        out
    }
}

fn label_text(labels: &[(&'static str, String)], le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(key, value)| format!("{key}=\"{}\"", escape(value)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// What a span's fields said, kept until it closes.
#[derive(Debug, Default)]
struct Observed {
    started: Option<Instant>,
    agent: Option<String>,
    provider: Option<String>,
    model: Option<String>,
    tool: Option<String>,
    error: Option<String>,
    input: u64,
    output: u64,
    cache_read: u64,
}

impl Visit for Observed {
    fn record_str(&mut self, field: &Field, value: &str) {
        let slot = match field.name() {
            "gen_ai.agent.name" => &mut self.agent,
            "gen_ai.provider.name" => &mut self.provider,
            "gen_ai.request.model" => &mut self.model,
            "gen_ai.tool.name" => &mut self.tool,
            "error.type" => &mut self.error,
            _ => return,
        };
        *slot = Some(value.to_owned());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "gen_ai.usage.input_tokens" => self.input = value,
            "gen_ai.usage.output_tokens" => self.output = value,
            "gen_ai.usage.cache_read.input_tokens" => self.cache_read = value,
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, u64::try_from(value).unwrap_or(0));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if matches!(
            field.name(),
            "gen_ai.agent.name" | "gen_ai.provider.name" | "gen_ai.request.model" | "gen_ai.tool.name" | "error.type"
        ) {
            self.record_str(field, &format!("{value:?}"));
        }
    }
}

/// Records the kernel's `invoke_agent`, `chat` and `execute_tool` spans into
/// [`Metrics::global`] when they close.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsLayer;

const SPANS: &[&str] = &["invoke_agent", "chat", "execute_tool"];

impl<S> tracing_subscriber::Layer<S> for MetricsLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        if !meta.target().starts_with("harness_core") || !SPANS.contains(&meta.name()) {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let mut observed = Observed {
            started: Some(Instant::now()),
            ..Observed::default()
        };
        attrs.record(&mut observed);
        span.extensions_mut().insert(observed);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(observed) = span.extensions_mut().get_mut::<Observed>() {
            values.record(observed);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(observed) = span.extensions_mut().remove::<Observed>() else {
            return;
        };
        let seconds = observed.started.map_or(0.0, |at| at.elapsed().as_secs_f64());
        let metrics = Metrics::global();
        let text = |value: Option<String>| value.unwrap_or_else(|| "unknown".to_owned());
        match span.name() {
            "invoke_agent" => {
                let agent = text(observed.agent);
                let outcome = observed.error.unwrap_or_else(|| "ok".to_owned());
                metrics.add(
                    "harness_turns_total",
                    vec![("agent", agent.clone()), ("outcome", outcome)],
                    1,
                );
                metrics.observe("harness_turn_duration_seconds", vec![("agent", agent)], seconds);
            }
            "chat" => {
                let provider = text(observed.provider);
                let model = text(observed.model);
                let outcome = observed.error.unwrap_or_else(|| "ok".to_owned());
                let base = vec![("provider", provider), ("model", model)];
                let mut with_outcome = base.clone();
                with_outcome.push(("outcome", outcome));
                metrics.add("harness_model_calls_total", with_outcome, 1);
                metrics.observe("harness_model_call_duration_seconds", base.clone(), seconds);
                for (kind, value) in [
                    ("input", observed.input),
                    ("output", observed.output),
                    ("cache_read", observed.cache_read),
                ] {
                    let mut labels = base.clone();
                    labels.push(("kind", kind.to_owned()));
                    metrics.add("harness_tokens_total", labels, value);
                }
            }
            _ => {
                let outcome = if observed.error.is_some() { "error" } else { "ok" };
                metrics.add(
                    "harness_tool_calls_total",
                    vec![("tool", text(observed.tool)), ("outcome", outcome.to_owned())],
                    1,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges_in_the_text_format() {
        let metrics = Metrics::default();
        metrics.add(
            "harness_turns_total",
            vec![("agent", "a\"b".into()), ("outcome", "ok".into())],
            2,
        );
        metrics.observe("harness_turn_duration_seconds", vec![("agent", "a".into())], 0.3);
        let text = metrics.render(&[Gauge {
            name: "harness_queue_depth",
            help: "Queued turns.",
            samples: vec![(vec![], 4.0)],
        }]);
        assert!(
            text.contains("harness_turns_total{agent=\"a\\\"b\",outcome=\"ok\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("harness_turn_duration_seconds_bucket{agent=\"a\",le=\"0.25\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("harness_turn_duration_seconds_bucket{agent=\"a\",le=\"0.5\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("harness_turn_duration_seconds_count{agent=\"a\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE harness_queue_depth gauge\nharness_queue_depth 4"),
            "{text}"
        );
    }

    #[test]
    fn gauges_of_one_name_from_two_sources_render_as_one_family() {
        let part = |kind: &str, value: f64| Gauge {
            name: "harness_approvals_pending",
            help: "Calls waiting.",
            samples: vec![(vec![("kind", kind.to_owned())], value)],
        };
        let text = Metrics::default().render(&[part("session", 1.0), part("task", 2.0)]);
        assert_eq!(
            text.matches("# TYPE harness_approvals_pending gauge").count(),
            1,
            "{text}"
        );
        assert!(
            text.contains(
                "harness_approvals_pending{kind=\"session\"} 1\nharness_approvals_pending{kind=\"task\"} 2\n"
            ),
            "{text}"
        );
    }
}
