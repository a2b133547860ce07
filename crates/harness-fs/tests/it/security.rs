//! Paths that must be refused.
