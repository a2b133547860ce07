//! The local shell.
