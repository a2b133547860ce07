//! Built-in tools: the file tools (`read_file`, `write_file`, `edit_file`, `list_files`,
//! `glob_files`, `grep_files`) and the shell tool (`execute`).
//!
//! Names and parameters follow the reference catalogue. Every tool finds what it works on in
//! the call's context, never in its own fields: the file tools use the caller's layered view
//! [`CallWorkspace::layered`](harness_fs::CallWorkspace) (the caller's own files with the
//! shared AGENTS.md, MEMORY.md and knowledge/ showing through, read-only), and the shell is a
//! [`CallShell`](harness_fs::CallShell) when the call has one, else the shell of the caller's
//! own layer ([`CallWorkspace::user`](harness_fs::CallWorkspace)). Outputs are bounded and say so when cut; failures are error results that say
//! what to do.

pub mod files;
pub mod shell;

pub use files::{EditFile, GlobFiles, GrepFiles, ListFiles, ReadFile, WriteFile, file_tools};
pub use shell::{Execute, shell_tool};
