//! With export off and text logs, nothing is added to the subscriber: the kernel's spans stay
//! disabled (their fields are never evaluated). One test per process: it installs the
//! global subscriber.

#![allow(missing_docs)]

use harness_ops::telemetry::{LogFormat, install};

#[test]
fn off_installs_no_span_layer_and_the_kernel_spans_stay_disabled() {
    let guard = install(
        tracing_subscriber::EnvFilter::new("error"),
        LogFormat::Text,
        std::io::sink,
        None,
        false,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!guard.exporting());
    let evaluated = std::sync::atomic::AtomicBool::new(false);
    let field = || {
        evaluated.store(true, std::sync::atomic::Ordering::SeqCst);
        "x"
    };
    let span = tracing::info_span!(target: "harness_core::agent", "invoke_agent", otel.name = field());
    assert!(span.is_disabled());
    assert!(
        !evaluated.load(std::sync::atomic::Ordering::SeqCst),
        "fields are not evaluated"
    );
    guard
        .shutdown(std::time::Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("{e}"));
}
