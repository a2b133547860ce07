//! [`Capture`] (public as [`OutputCapture`](crate::OutputCapture)): a bounded output buffer
//! that keeps the head and the tail of a stream. Shared with the other shells (the sandbox's),
//! so every shell caps and renders output the same way.

use crate::text::{utf8_head, utf8_tail};
use std::collections::VecDeque;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Keeps the first half and the last half of `cap` bytes of everything pushed, and counts the
/// rest: what a [`Shell`](crate::Shell) returns of a command's stdout or stderr.
///
/// ```
/// let mut capture = harness_fs::OutputCapture::new(10);
/// capture.push(b"0123456789abc");
/// assert!(capture.truncated());
/// assert_eq!(capture.total(), 13);
/// assert_eq!(capture.render(), "01234\n[… 3 bytes omitted …]\n89abc");
/// ```
#[derive(Debug)]
pub struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    /// A buffer keeping at most `cap` bytes: half from the start, half from the end.
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: cap - head_cap,
            total: 0,
        }
    }

    /// Adds the next bytes of the stream.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.head_cap {
            let take = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Total bytes pushed.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether anything was dropped.
    pub fn truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// The kept text, with a marker where bytes were dropped. Characters cut at the edges of
    /// the marker are dropped too; other invalid UTF-8 becomes U+FFFD.
    pub fn render(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if !self.truncated() {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        let omitted = self.total - (self.head.len() + tail.len()) as u64;
        format!(
            "{}\n[… {omitted} bytes omitted …]\n{}",
            String::from_utf8_lossy(utf8_head(&self.head)),
            String::from_utf8_lossy(utf8_tail(&tail))
        )
    }
}

/// Reads `reader` to its end into `capture`. Reading never stops early, so the writer never
/// blocks on a full pipe.
pub(crate) async fn drain<R: AsyncRead + Unpin>(reader: Option<R>, capture: &mut Capture) -> std::io::Result<()> {
    let Some(mut reader) = reader else {
        return Ok(());
    };
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = reader.read(&mut buffer).await?;
        if read == 0 {
            return Ok(());
        }
        capture.push(&buffer[..read]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail() {
        let mut capture = Capture::new(10);
        capture.push(b"0123");
        assert_eq!((capture.render().as_str(), capture.truncated()), ("0123", false));
        capture.push(b"456789");
        assert_eq!((capture.render().as_str(), capture.truncated()), ("0123456789", false));
        capture.push(b"abc");
        assert!(capture.truncated());
        assert_eq!(capture.render(), "01234\n[… 3 bytes omitted …]\n89abc");
        capture.push(&[b'x'; 100]);
        assert_eq!(capture.total(), 113);
        assert_eq!(capture.render(), "01234\n[… 103 bytes omitted …]\nxxxxx");
    }
}
