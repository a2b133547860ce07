//! `HARNESS_LOG_FORMAT=json`: one JSON object per log line, with the OpenTelemetry trace and
//! span ids of the span it was logged in, so logs and traces join.
//!
//! ```json
//! {"timestamp":"2026-12-03T14:00:00.000Z","level":"WARN","target":"harness_core::agent",
//!  "message":"repaired tool calls","fields":{"repairs":1},"span":"invoke_agent",
//!  "trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}
//! ```

use opentelemetry::trace::TraceContextExt as _;
use serde_json::{Map, Value};
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The JSON line formatter.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

#[derive(Default)]
struct Fields {
    message: Option<String>,
    fields: Map<String, Value>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                Value::String(text) => text,
                other => other.to_string(),
            });
        } else {
            self.fields.insert(field.name().to_owned(), value);
        }
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert("timestamp".into(), Value::String(jiff::Timestamp::now().to_string()));
        line.insert("level".into(), Value::String(meta.level().to_string()));
        line.insert("target".into(), Value::String(meta.target().to_owned()));
        line.insert("message".into(), Value::String(fields.message.unwrap_or_default()));
        if !fields.fields.is_empty() {
            line.insert("fields".into(), Value::Object(fields.fields));
        }
        if let Some(span) = ctx.lookup_current() {
            line.insert("span".into(), Value::String(span.name().to_owned()));
        }
        // The OpenTelemetry layer activates the entered span's context on this thread.
        let context = opentelemetry::Context::current();
        let span = context.span();
        let ids = span.span_context();
        if ids.is_valid() {
            line.insert("trace_id".into(), Value::String(ids.trace_id().to_string()));
            line.insert("span_id".into(), Value::String(ids.span_id().to_string()));
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}
