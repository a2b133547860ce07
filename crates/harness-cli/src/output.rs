//! Writing to stdout through a handle: a closed pipe (`harness sessions show … | head -1`)
//! ends the output quietly instead of panicking, and a turn in progress still completes.

use std::io::Write as _;

/// Stdout, remembering whether the reader went away.
#[derive(Debug, Default)]
pub(crate) struct Out {
    closed: bool,
}

impl Out {
    /// A writer on the process's stdout.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether the reader closed the pipe; nothing more is written then.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    /// Writes `text` as is (no newline) and flushes. A closed pipe is remembered, other
    /// errors are returned.
    pub(crate) fn write(&mut self, text: &str) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        // Known credentials and URL passwords never reach stdout.
        let text = harness_core::redact::redact_known(text);
        let mut stdout = std::io::stdout().lock();
        let result = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
        match result {
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }

    /// Writes one line.
    pub(crate) fn line(&mut self, text: &str) -> std::io::Result<()> {
        let mut owned = String::with_capacity(text.len() + 1);
        owned.push_str(text);
        owned.push('\n');
        self.write(&owned)
    }
}
