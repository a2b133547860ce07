//! OpenTelemetry export of the kernel's GenAI spans (`invoke_agent {agent}` → `chat {model}`
//! → `execute_tool {tool}`, see [`harness_core::semconv`]) over OTLP/HTTP protobuf, and the
//! process's log subscriber (text, or one JSON object per line with trace and span ids).
//!
//! What turns export on, most specific first: `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` turn it off; otherwise an endpoint in
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is), `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `[telemetry] endpoint` (both get `/v1/traces` appended) turns it on, unless
//! `[telemetry] enabled = false`. `OTEL_EXPORTER_OTLP_HEADERS` (and `[telemetry] headers`),
//! `OTEL_SERVICE_NAME` (else `[telemetry] service_name`, else `harness`) and
//! `OTEL_RESOURCE_ATTRIBUTES` apply as the specification says. Only `http/protobuf` is built
//! in: any other `OTEL_EXPORTER_OTLP_PROTOCOL` is an error that says so.
//!
//! Every exported span name, attribute and event passes through the process's redaction path
//! ([`harness_core::redact`]) before it leaves; message content is exported only with
//! `[telemetry] capture_content = true`.
//!
//! With export off and text logs, no OpenTelemetry layer is installed: the spans are disabled
//! `tracing` spans (their fields are never evaluated).

use harness::capability::{ConfigSection, Registration};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tracing_subscriber::Layer as _;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// `[telemetry]`'s registration: a section only (the subscriber is the process's, not an
/// agent's).
pub const SECTION: Registration = Registration::section_only::<TelemetrySection>("telemetry");

/// `[telemetry]` of harness.toml. The standard `OTEL_*` variables win over it.
///
/// ```toml
/// [telemetry]
/// endpoint = "http://127.0.0.1:4318"   # OTLP/HTTP base URL; /v1/traces is appended
/// service_name = "harness-prod"
/// capture_content = false              # message content in spans: opt in
/// headers = { authorization = "Bearer ${OTLP_TOKEN}" }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// `false` turns export off even when an endpoint is set (default: on when one is).
    pub enabled: Option<bool>,
    /// OTLP/HTTP base URL, e.g. `http://127.0.0.1:4318`.
    pub endpoint: Option<String>,
    /// Only `http/protobuf` is built in.
    pub protocol: Option<String>,
    /// Headers sent with every export (authentication of a hosted backend).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `service.name` (default `harness`; `OTEL_SERVICE_NAME` wins).
    pub service_name: Option<String>,
    /// More resource attributes (`OTEL_RESOURCE_ATTRIBUTES` wins for a key it names).
    #[serde(default)]
    pub resource_attributes: BTreeMap<String, String>,
    /// Export message content (tool arguments and results, the final answer), redacted
    /// (default false).
    #[serde(default)]
    pub capture_content: bool,
}

impl ConfigSection for TelemetrySection {
    const KEY: &'static str = "telemetry";
}

/// Where and how spans are exported, resolved from `[telemetry]` and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSettings {
    /// The full traces URL (`…/v1/traces`).
    pub traces_endpoint: String,
    /// Headers from `[telemetry]` (the exporter adds `OTEL_EXPORTER_OTLP_HEADERS` itself).
    pub headers: BTreeMap<String, String>,
    /// `service.name`.
    pub service_name: String,
    /// Resource attributes from `[telemetry]` (the environment's are added by the SDK).
    pub resource_attributes: BTreeMap<String, String>,
    /// Whether content is captured.
    pub capture_content: bool,
}

/// A telemetry setting that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// A protocol other than `http/protobuf`.
    #[error(
        "OTLP protocol `{0}` is not built into harness: use `http/protobuf` (set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf \
         or remove it; an OpenTelemetry Collector can forward to a gRPC backend)"
    )]
    Protocol(String),
    /// The exporter refused its configuration (a malformed endpoint or header).
    #[error("cannot start the OTLP exporter: {0} (check OTEL_EXPORTER_OTLP_ENDPOINT or [telemetry] endpoint)")]
    Exporter(String),
    /// The log subscriber was already installed.
    #[error("a log subscriber is already installed")]
    AlreadyInstalled,
}

const DEFAULT_SERVICE: &str = "harness";

/// Resolves what to export, or `None` when export is off. `env` reads a variable.
///
/// # Errors
/// [`TelemetryError::Protocol`] for a protocol that is not built in.
pub fn resolve(
    section: Option<&TelemetrySection>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<ExportSettings>, TelemetryError> {
    let set = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return Ok(None);
    }
    let section = section.cloned().unwrap_or_default();
    if section.enabled == Some(false) {
        return Ok(None);
    }
    let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .or(section.protocol.clone());
    if let Some(protocol) = protocol
        && protocol != "http/protobuf"
    {
        return Err(TelemetryError::Protocol(protocol));
    }
    let traces = |base: &str| {
        let base = base.trim_end_matches('/');
        if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        }
    };
    let endpoint = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| traces(&base)))
        .or_else(|| section.endpoint.as_deref().map(traces));
    let Some(traces_endpoint) = endpoint else {
        return Ok(None);
    };
    Ok(Some(ExportSettings {
        traces_endpoint,
        headers: section.headers,
        service_name: set("OTEL_SERVICE_NAME")
            .or(section.service_name)
            .unwrap_or_else(|| DEFAULT_SERVICE.to_owned()),
        resource_attributes: section.resource_attributes,
        capture_content: section.capture_content,
    }))
}

/// How the process logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Text,
    /// One JSON object per line with `trace_id` and `span_id` when inside a span
    /// (`HARNESS_LOG_FORMAT=json`).
    Json,
}

impl LogFormat {
    /// From `HARNESS_LOG_FORMAT` (`text` or `json`; unset is text).
    ///
    /// # Errors
    /// Any other value, with the accepted ones.
    pub fn from_env(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim) {
            None | Some("" | "text") => Ok(Self::Text),
            Some("json") => Ok(Self::Json),
            Some(other) => Err(format!("HARNESS_LOG_FORMAT={other} is not known: use `text` or `json`")),
        }
    }
}

/// The installed telemetry: call [`shutdown`](Self::shutdown) before the process exits so
/// the spans still buffered are sent.
#[derive(Debug)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends what is buffered and stops the exporter (waits at most `timeout`).
    ///
    /// # Errors
    /// The exporter's failure (an unreachable collector), as text.
    pub fn shutdown(self, timeout: Duration) -> Result<(), String> {
        match self.provider {
            Some(provider) => provider.shutdown_with_timeout(timeout).map_err(|err| err.to_string()),
            None => Ok(()),
        }
    }
}

/// Installs the process's subscriber: logs (`filter`, written by `writer` in `format`), when
/// `export` is set the OTLP span exporter (spans of the harness crates at info level, whatever
/// the log filter says), and with `metrics` the [`MetricsLayer`](crate::metrics::MetricsLayer)
/// (`harness serve`'s `/metrics`).
///
/// Call it outside a Tokio runtime (the exporter's blocking HTTP client is built here).
///
/// # Errors
/// The exporter refused its settings, or a subscriber is already installed.
pub fn install<W>(
    filter: tracing_subscriber::EnvFilter,
    format: LogFormat,
    writer: W,
    export: Option<&ExportSettings>,
    metrics: bool,
) -> Result<TelemetryGuard, TelemetryError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let provider = match export {
        Some(settings) => {
            harness_core::semconv::set_capture_content(settings.capture_content);
            Some(exporting_provider(settings)?)
        }
        // JSON logs carry trace ids: spans get ids from a provider that exports nothing.
        None if format == LogFormat::Json => Some(SdkTracerProvider::builder().build()),
        None => None,
    };
    let spans = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("harness"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_filter(span_filter())
    });
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .event_format(crate::json_log::JsonLines)
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
    };
    let metrics = metrics.then(|| crate::metrics::MetricsLayer.with_filter(span_filter()));
    tracing_subscriber::registry()
        .with(spans)
        .with(metrics)
        .with(logs)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    if provider.is_some() {
        harness_core::semconv::set_traceparent_source(current_traceparent);
    }
    // With JSON logs and no export the provider only makes ids: it is not kept for shutdown.
    Ok(TelemetryGuard {
        provider: provider.filter(|_| export.is_some()),
    })
}

/// The W3C `traceparent` of the current span (`None` when it has no recorded context), the
/// source [`harness_core::semconv::traceparent`] reads once [`install`] records spans.
pub fn current_traceparent() -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = tracing::Span::current().context();
    let span = context.span();
    let ids = span.span_context();
    ids.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            ids.trace_id(),
            ids.span_id(),
            ids.trace_flags().to_u8()
        )
    })
}

/// Makes `span` (not yet entered) a child of the remote span `traceparent` names, so its
/// spans join the caller's trace. A malformed `traceparent` (it comes from a request) is
/// ignored and the span starts a trace of its own.
pub fn join_remote(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::propagation::TextMapPropagator as _;
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let context = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    if !context.span().span_context().is_valid() {
        return;
    }
    if let Err(err) = span.set_parent(context) {
        tracing::debug!(error = %err, "remote trace context not joined");
    }
}

/// The spans the exporter sees: the harness crates' at info and above.
fn span_filter() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new()
        .with_target("harness", tracing::Level::INFO)
        .with_target("harness_core", tracing::Level::INFO)
        .with_target("harness_serve", tracing::Level::INFO)
        .with_target("harness_models", tracing::Level::INFO)
        .with_target("harness_memory", tracing::Level::INFO)
        .with_target("harness_mcp", tracing::Level::INFO)
        .with_target("harness_sandbox", tracing::Level::INFO)
}

/// A tracer provider exporting in batches to `settings`, through the redaction path.
///
/// # Errors
/// The exporter refused its settings.
pub fn exporting_provider(settings: &ExportSettings) -> Result<SdkTracerProvider, TelemetryError> {
    let headers: HashMap<String, String> = settings.headers.clone().into_iter().collect();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(settings.traces_endpoint.clone())
        .with_headers(headers)
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|err| TelemetryError::Exporter(harness_core::redact::redact(&err.to_string())))?;
    // The section's attributes, then the environment's (OTEL_RESOURCE_ATTRIBUTES and the SDK's
    // own, read by the default detectors) over them, then the resolved service.name.
    let from_env = Resource::builder().build();
    let resource = Resource::builder_empty()
        .with_attributes(
            settings
                .resource_attributes
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .with_attributes(
            from_env
                .iter()
                .filter(|(key, _)| key.as_str() != "service.name")
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .with_service_name(settings.service_name.clone())
        .build();
    Ok(SdkTracerProvider::builder()
        .with_resource(resource)
        .with_batch_exporter(Redacting(exporter))
        .build())
}

/// A span exporter that masks every span name, attribute and event through the process's
/// redactor before the inner exporter sends it.
#[derive(Debug)]
pub struct Redacting<E>(pub E);

fn redact_value(value: Value) -> Value {
    match value {
        Value::String(text) => {
            let masked = harness_core::redact::redact(text.as_str());
            if masked == text.as_str() {
                Value::String(text)
            } else {
                Value::String(masked.into())
            }
        }
        other => other,
    }
}

fn redact_attributes(attributes: &mut [KeyValue]) {
    for attribute in attributes {
        let value = std::mem::replace(&mut attribute.value, Value::Bool(false));
        attribute.value = redact_value(value);
    }
}

/// Masks one span in place.
pub fn redact_span(span: &mut SpanData) {
    let name = harness_core::redact::redact(&span.name);
    if name != span.name {
        span.name = name.into();
    }
    redact_attributes(&mut span.attributes);
    for event in &mut span.events.events {
        let name = harness_core::redact::redact(&event.name);
        if name != event.name {
            event.name = name.into();
        }
        redact_attributes(&mut event.attributes);
    }
}

impl<E: SpanExporter> SpanExporter for Redacting<E> {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        batch.iter_mut().for_each(redact_span);
        self.0.export(batch).await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn off_without_an_endpoint_and_when_disabled() {
        assert_eq!(resolve(None, &env(&[])).unwrap_or_else(|e| panic!("{e}")), None);
        let on = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        assert_eq!(resolve(None, &on).unwrap_or_else(|e| panic!("{e}")), None);
        let none = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ]);
        assert_eq!(resolve(None, &none).unwrap_or_else(|e| panic!("{e}")), None);
        let section = TelemetrySection {
            enabled: Some(false),
            endpoint: Some("http://h:4318".into()),
            ..TelemetrySection::default()
        };
        assert_eq!(
            resolve(Some(&section), &env(&[])).unwrap_or_else(|e| panic!("{e}")),
            None
        );
    }

    #[test]
    fn environment_wins_and_paths_follow_the_specification() {
        let section = TelemetrySection {
            endpoint: Some("http://config:4318/".into()),
            service_name: Some("from-config".into()),
            ..TelemetrySection::default()
        };
        let got = resolve(Some(&section), &env(&[])).unwrap_or_else(|e| panic!("{e}"));
        let got = got.unwrap_or_else(|| panic!("on"));
        assert_eq!(got.traces_endpoint, "http://config:4318/v1/traces");
        assert_eq!(got.service_name, "from-config");
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_SERVICE_NAME", "svc"),
        ]);
        let got = resolve(Some(&section), &vars).unwrap_or_else(|e| panic!("{e}"));
        let got = got.unwrap_or_else(|| panic!("on"));
        assert_eq!(got.traces_endpoint, "http://env:4318/v1/traces");
        assert_eq!(got.service_name, "svc");
        let vars = env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom")]);
        let got = resolve(None, &vars).unwrap_or_else(|e| panic!("{e}"));
        let got = got.unwrap_or_else(|| panic!("on"));
        assert_eq!(got.traces_endpoint, "http://t:1/custom");
        assert_eq!(got.service_name, "harness");
    }

    #[test]
    fn other_protocols_are_refused_with_what_to_do() {
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        let err = resolve(None, &vars).err().unwrap_or_else(|| panic!("refused"));
        assert!(err.to_string().contains("use `http/protobuf`"), "{err}");
    }

    #[test]
    fn section_refuses_unknown_keys() {
        let parsed: Result<TelemetrySection, _> = toml::from_str("endpont = \"x\"");
        assert!(parsed.is_err());
    }

    #[test]
    fn log_format_from_env() {
        assert_eq!(LogFormat::from_env(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::from_env(Some("json")), Ok(LogFormat::Json));
        assert!(LogFormat::from_env(Some("xml")).is_err_and(|e| e.contains("`json`")));
    }

    /// A span joined to a remote `traceparent` carries its trace id and is its child; a
    /// malformed value leaves the span a trace of its own; no recorded span, no traceparent.
    #[test]
    fn a_remote_traceparent_is_joined_and_a_malformed_one_ignored() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        assert_eq!(super::current_traceparent(), None, "no subscriber, no trace context");
        let provider = SdkTracerProvider::builder().build();
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let remote_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        tracing::subscriber::with_default(subscriber, || {
            let joined = tracing::info_span!("joined");
            super::join_remote(&joined, &format!("00-{remote_trace}-00f067aa0ba902b7-01"));
            let inside = joined.in_scope(super::current_traceparent).unwrap_or_default();
            assert!(inside.starts_with(&format!("00-{remote_trace}-")), "{inside}");
            assert!(
                !inside.contains("00f067aa0ba902b7"),
                "the span's own id, not the parent's: {inside}"
            );
            for malformed in ["garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""] {
                let alone = tracing::info_span!("alone");
                super::join_remote(&alone, malformed);
                let own = alone.in_scope(super::current_traceparent).unwrap_or_default();
                assert!(
                    own.starts_with("00-") && !own.contains(remote_trace),
                    "{malformed:?}: {own}"
                );
            }
        });
    }
}
