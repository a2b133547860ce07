//! Operating Harness for months: OpenTelemetry GenAI span export over OTLP/HTTP and
//! structured logs ([`telemetry`], [`json_log`]), Prometheus metrics derived from the spans
//! ([`metrics`]), retention and `harness maintenance` ([`retention`]), and the `harness
//! doctor` report ([`doctor`]).
//!
//! The binary installs these (libraries never install subscribers); the kernel's spans and
//! their attribute names are [`harness_core::semconv`]'s.

pub mod doctor;
pub mod json_log;
pub mod metrics;
pub mod retention;
pub mod telemetry;

pub use retention::{Maintenance, MaintenanceReport, RETENTION, RetentionSection, Target};
pub use telemetry::{ExportSettings, LogFormat, SECTION, TelemetryError, TelemetryGuard, TelemetrySection};
