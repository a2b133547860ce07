//! Integration tests of harness-snapshot.

mod conformance;
mod hostile;
mod lifecycle;
mod support;
