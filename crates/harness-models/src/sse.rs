//! Server-sent events: an incremental parser for the `text/event-stream` bodies both provider
//! protocols stream.
//!
//! Our own, because it is small and its corner cases are the ones providers hit: a `data:` line
//! split across network chunks (even inside a multi-byte character or between `\r` and `\n`),
//! multi-line data, comments (`: keep-alive`), `event:` names and CRLF line ends. It follows the
//! WHATWG parsing rules, with one leniency: at the end of the body, an event whose lines are
//! complete but that lacks the closing blank line is still delivered (some servers close right
//! after the last `data:` line). An unterminated last line is dropped, so a body cut inside a
//! line never yields half a JSON document.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name; empty when the server sent none (the SSE default, `message`).
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The incremental parser: feed it bytes as they arrive, collect events as they complete.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes of an unfinished line.
    buf: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` at the start of the next one ends no line.
    skip_lf: bool,
    /// Whether the byte-order mark check has been done.
    started: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Feeds bytes; every event they complete is appended to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut impl Extend<SseEvent>) {
        const BOM: &[u8] = b"\xEF\xBB\xBF";
        if self.started {
            self.feed(bytes, out);
            return;
        }
        // The byte-order mark may itself arrive split: hold bytes until it is decided.
        self.buf.extend_from_slice(bytes);
        if self.buf.len() < BOM.len() && BOM.starts_with(&self.buf) {
            return;
        }
        self.started = true;
        let head = std::mem::take(&mut self.buf);
        self.feed(head.strip_prefix(BOM).unwrap_or(&head), out);
    }

    fn feed(&mut self, mut bytes: &[u8], out: &mut impl Extend<SseEvent>) {
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            bytes = bytes.strip_prefix(b"\n").unwrap_or(bytes);
        }
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (line, after) = rest.split_at(end);
            let mut next = &after[1..];
            if after[0] == b'\r' {
                match next.first() {
                    Some(b'\n') => next = &next[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            if self.buf.is_empty() {
                self.line(line, out);
            } else {
                let mut whole = std::mem::take(&mut self.buf);
                whole.extend_from_slice(line);
                self.line(&whole, out);
                whole.clear();
                self.buf = whole;
            }
            rest = next;
        }
        self.buf.extend_from_slice(rest);
    }

    /// Ends the input: delivers a pending event whose lines were complete. An unterminated
    /// last line is dropped.
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        self.buf.clear();
        self.dispatch()
    }

    fn line(&mut self, line: &[u8], out: &mut impl Extend<SseEvent>) {
        if line.is_empty() {
            if let Some(event) = self.dispatch() {
                out.extend(std::iter::once(event));
            }
            return;
        }
        if line[0] == b':' {
            return; // a comment, e.g. a keep-alive
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                self.data.push_str(&String::from_utf8_lossy(value));
            }
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            // `id` and `retry` only matter for reconnecting clients; a model response is never resumed.
            _ => {}
        }
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        })
    }
}

/// A stream of [`SseEvent`]s over a stream of body chunks.
pub struct SseStream<S> {
    inner: S,
    parser: SseParser,
    pending: VecDeque<SseEvent>,
    done: bool,
}

/// Parses `body` (e.g. `reqwest::Response::bytes_stream()`) into events. A body error is
/// passed through and ends the stream.
pub fn sse_events<S, E>(body: S) -> SseStream<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    SseStream {
        inner: body,
        parser: SseParser::default(),
        pending: VecDeque::new(),
        done: false,
    }
}

impl<S, E> Stream for SseStream<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    type Item = Result<SseEvent, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.inner.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(bytes))) => this.parser.push(&bytes, &mut this.pending),
                Poll::Ready(Some(Err(err))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(err)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.pending.extend(this.parser.finish());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out);
        }
        out.extend(parser.finish());
        out
    }

    /// Parses `body` whole, then split at every byte offset (two pieces) and byte by byte,
    /// and checks that every split yields `expect`.
    fn check(body: &str, expect: &[SseEvent]) {
        let bytes = body.as_bytes();
        assert_eq!(parse_chunks(&[bytes]), expect, "whole body");
        for at in 0..=bytes.len() {
            let (a, b) = bytes.split_at(at);
            assert_eq!(parse_chunks(&[a, b]), expect, "split at byte {at}");
        }
        let single: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_chunks(&single), expect, "byte by byte");
        for size in [2, 3, 7] {
            let pieces: Vec<&[u8]> = bytes.chunks(size).collect();
            assert_eq!(parse_chunks(&pieces), expect, "chunks of {size}");
        }
    }

    #[test]
    fn plain_data_events() {
        check("data: a\n\ndata: b\n\n", &[ev("", "a"), ev("", "b")]);
    }

    #[test]
    fn openai_style_stream_with_done() {
        let body = "data: {\"choices\":[{\"delta\":{\"content\":\"Hé 你好\"}}]}\n\n\
                    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\n\
                    data: [DONE]\n\n";
        check(
            body,
            &[
                ev("", "{\"choices\":[{\"delta\":{\"content\":\"Hé 你好\"}}]}"),
                ev("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":3}}"),
                ev("", "[DONE]"),
            ],
        );
    }

    #[test]
    fn anthropic_style_named_events_with_crlf() {
        let body = "event: message_start\r\ndata: {\"type\":\"message_start\"}\r\n\r\n\
                    event: ping\r\ndata: {\"type\":\"ping\"}\r\n\r\n";
        check(
            body,
            &[
                ev("message_start", "{\"type\":\"message_start\"}"),
                ev("ping", "{\"type\":\"ping\"}"),
            ],
        );
    }

    #[test]
    fn multi_line_data_comments_and_lone_cr() {
        let body = ": keep-alive\n\ndata: line1\rdata:line2\r\ndata\n\n:comment\nevent: x\ndata: y\n\n";
        check(body, &[ev("", "line1\nline2\n"), ev("x", "y")]);
    }

    #[test]
    fn events_without_data_are_not_dispatched_and_reset_the_name() {
        check("event: a\n\ndata: b\n\n", &[ev("", "b")]);
    }

    #[test]
    fn unknown_fields_and_no_space_after_colon() {
        check("id: 7\nretry: 10\nfoo: bar\ndata:x\n\n", &[ev("", "x")]);
    }

    #[test]
    fn a_complete_last_event_without_blank_line_is_delivered() {
        check("data: a\n\ndata: [DONE]\n", &[ev("", "a"), ev("", "[DONE]")]);
    }

    #[test]
    fn an_unterminated_last_line_is_dropped() {
        check("data: a\n\ndata: {\"cut", &[ev("", "a")]);
    }

    #[test]
    fn byte_order_mark_is_ignored() {
        check("\u{feff}data: a\n\n", &[ev("", "a")]);
    }

    #[tokio::test]
    async fn stream_adapter_passes_body_errors_through() {
        let chunks: Vec<Result<Bytes, &str>> = vec![
            Ok(Bytes::from_static(b"data: a\n\nda")),
            Ok(Bytes::from_static(b"ta: b\n\n")),
            Err("reset"),
        ];
        let events: Vec<_> = sse_events(futures::stream::iter(chunks)).collect().await;
        assert_eq!(events, vec![Ok(ev("", "a")), Ok(ev("", "b")), Err("reset")]);
    }
}
