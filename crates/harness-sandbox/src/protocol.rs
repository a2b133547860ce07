//! The wire between the harness and the in-sandbox init: length-prefixed binary frames over
//! the init's stdin (host → init) and stdout (init → host). Both ends are this crate, so the
//! format is private; it is versioned by the `hello` frame all the same.
//!
//! A frame is `len: u32 (big endian, bytes after this field) | kind: u8 | id: u64 | payload`.
//! Control payloads are JSON; stream payloads are raw bytes.

use serde::{Deserialize, Serialize};
use std::io::{self, Read};

/// The protocol version the init reports in its hello frame.
pub(crate) const PROTOCOL_VERSION: u32 = 1;

/// The largest frame either side accepts (a payload chunk is at most 64 KiB; JSON is small).
pub(crate) const MAX_FRAME: usize = 1 << 20;

/// Header bytes after the length: kind and id.
const HEADER: usize = 1 + 8;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// host → init: start a process (JSON [`ExecSpec`]).
    Exec = 1,
    /// host → init: bytes for a process's stdin.
    Stdin = 2,
    /// host → init: close a process's stdin.
    CloseStdin = 3,
    /// host → init: kill a process's whole process group.
    Kill = 4,
    /// init → host: the init's self-check (JSON [`InitReport`]), id 0, sent once.
    Hello = 10,
    /// init → host: a process started (JSON [`Started`]).
    Started = 11,
    /// init → host: bytes a process wrote to stdout.
    Stdout = 12,
    /// init → host: bytes a process wrote to stderr.
    Stderr = 13,
    /// init → host: a process ended (JSON [`Exited`]); its output frames all came before.
    Exited = 14,
    /// init → host: a process could not be started (JSON [`Failed`]).
    Failed = 15,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Exec,
            2 => Self::Stdin,
            3 => Self::CloseStdin,
            4 => Self::Kill,
            10 => Self::Hello,
            11 => Self::Started,
            12 => Self::Stdout,
            13 => Self::Stderr,
            14 => Self::Exited,
            15 => Self::Failed,
            _ => return None,
        })
    }
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) kind: Kind,
    pub(crate) id: u64,
    pub(crate) payload: Vec<u8>,
}

impl Frame {
    pub(crate) fn new(kind: Kind, id: u64, payload: Vec<u8>) -> Self {
        Self { kind, id, payload }
    }

    /// A frame whose payload is `value` as JSON.
    pub(crate) fn json(kind: Kind, id: u64, value: &impl Serialize) -> Self {
        // Serialising our own plain structs cannot fail; an empty payload would be refused by
        // the reader with a clear error rather than panicking here.
        Self::new(kind, id, serde_json::to_vec(value).unwrap_or_default())
    }

    /// The payload parsed as JSON.
    pub(crate) fn parse<T: for<'de> Deserialize<'de>>(&self) -> io::Result<T> {
        serde_json::from_slice(&self.payload).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
    }

    /// The frame's bytes on the wire.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let len = u32::try_from(HEADER + self.payload.len()).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(4 + HEADER + self.payload.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.push(self.kind as u8);
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.payload);
        out
    }
}

/// Incremental decoder: push bytes as they arrive, pop whole frames. Popping advances an
/// offset (the consumed front is dropped at the next push), so a burst of many frames costs
/// linear time, not a shift of the whole buffer per frame.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    buffer: Vec<u8>,
    start: usize,
}

impl Decoder {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// Whether no byte is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.buffer.len()
    }

    /// The next whole frame, `None` when more bytes are needed.
    ///
    /// # Errors
    /// `InvalidData` for an oversized or malformed frame: the stream cannot be trusted after it.
    pub(crate) fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        let buffer = &self.buffer[self.start..];
        if buffer.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]) as usize;
        if !(HEADER..=MAX_FRAME).contains(&len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad frame length {len}"),
            ));
        }
        if buffer.len() < 4 + len {
            return Ok(None);
        }
        let kind = Kind::from_byte(buffer[4])
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("unknown frame kind {}", buffer[4])))?;
        let mut id = [0u8; 8];
        id.copy_from_slice(&buffer[5..13]);
        let payload = buffer[13..4 + len].to_vec();
        self.start += 4 + len;
        Ok(Some(Frame {
            kind,
            id: u64::from_be_bytes(id),
            payload,
        }))
    }
}

/// Reads one whole frame from a blocking reader; `None` at a clean end of stream.
///
/// # Errors
/// IO errors, a stream cut inside a frame, or a malformed frame.
pub(crate) fn read_frame(reader: &mut impl Read, decoder: &mut Decoder) -> io::Result<Option<Frame>> {
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if let Some(frame) = decoder.next_frame()? {
            return Ok(Some(frame));
        }
        let read = reader.read(&mut chunk)?;
        if read == 0 {
            return if decoder.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream cut inside a frame",
                ))
            };
        }
        decoder.push(&chunk[..read]);
    }
}

/// A process to start inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExecSpec {
    /// The program and its arguments; the program is looked up in `PATH` by `sh`.
    pub(crate) argv: Vec<String>,
    /// Absolute working directory inside the sandbox.
    pub(crate) cwd: String,
    /// The whole environment of the process (nothing else is inherited).
    pub(crate) env: Vec<(String, String)>,
    /// Whether stdin is a pipe fed by [`Kind::Stdin`] frames (else `/dev/null`).
    pub(crate) stdin: bool,
    /// Whether the process sees the work tree read-only (plan mode): a second Landlock layer
    /// denies every write outside the private `/tmp`.
    #[serde(default)]
    pub(crate) read_only: bool,
}

/// A process started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Started {
    /// Its pid inside the sandbox's pid namespace (also its process group).
    pub(crate) pid: i32,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Exited {
    /// The exit code, when it exited.
    pub(crate) code: Option<i32>,
    /// The signal that killed it, when one did.
    pub(crate) signal: Option<i32>,
}

/// Why a process could not be started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Failed {
    /// What went wrong, for the caller.
    pub(crate) message: String,
}

/// What the init proved about its own confinement before serving, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InitReport {
    /// [`PROTOCOL_VERSION`] of the init binary.
    pub(crate) protocol: u32,
    /// The init's pid (1 when it is the pid namespace's init).
    pub(crate) pid: i32,
    /// Real uid inside the sandbox.
    pub(crate) uid: u32,
    /// `CapEff` and `CapPrm` from `/proc/self/status` were all zero.
    pub(crate) no_capabilities: bool,
    /// `NoNewPrivs` was set.
    pub(crate) no_new_privs: bool,
    /// The Landlock ABI the ruleset was enforced with (0 when not enforced).
    pub(crate) landlock_abi: u8,
    /// The seccomp filter was installed.
    pub(crate) seccomp: bool,
    /// When confinement failed: why (the init then exits without serving).
    pub(crate) error: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_through_a_split_stream() {
        let frames = [
            Frame::new(Kind::Stdout, 7, b"hello".to_vec()),
            Frame::json(
                Kind::Exited,
                u64::MAX,
                &Exited {
                    code: Some(3),
                    signal: None,
                },
            ),
            Frame::new(Kind::CloseStdin, 0, Vec::new()),
        ];
        let wire: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let mut decoder = Decoder::default();
        let mut seen = Vec::new();
        for byte in wire {
            decoder.push(&[byte]);
            while let Some(frame) = decoder.next_frame().unwrap() {
                seen.push(frame);
            }
        }
        assert_eq!(seen, frames);
        assert_eq!(
            seen[1].parse::<Exited>().unwrap(),
            Exited {
                code: Some(3),
                signal: None
            }
        );
    }

    #[test]
    fn a_burst_of_frames_and_a_frame_cut_across_pushes_decode_in_order() {
        let frames: Vec<Frame> = (0..1000u64)
            .map(|id| Frame::new(Kind::Stdin, id, vec![u8::try_from(id % 251).unwrap(); 100]))
            .collect();
        let wire: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let (first, rest) = wire.split_at(wire.len() / 2 + 3);
        let mut decoder = Decoder::default();
        let mut seen = Vec::new();
        for part in [first, rest] {
            decoder.push(part);
            while let Some(frame) = decoder.next_frame().unwrap() {
                seen.push(frame);
            }
        }
        assert_eq!(seen, frames);
        assert!(decoder.is_empty());
    }

    #[test]
    fn malformed_frames_are_refused() {
        for bad in [
            vec![0, 0, 0, 1, 12],                            // shorter than the header
            vec![0, 0x20, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0], // longer than MAX_FRAME
            vec![0, 0, 0, 9, 99, 0, 0, 0, 0, 0, 0, 0, 0],    // unknown kind
        ] {
            let mut decoder = Decoder::default();
            decoder.push(&bad);
            assert!(decoder.next_frame().is_err(), "{bad:?}");
        }
        let mut cut = &Frame::new(Kind::Stdout, 1, b"abc".to_vec()).encode()[..10];
        assert_eq!(
            read_frame(&mut cut, &mut Decoder::default()).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
