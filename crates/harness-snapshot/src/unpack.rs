//! The hardened unpacker. It is meant to run **inside** the sandbox, as the sandbox uid,
//! under its Landlock rules (the sandbox init's `unpack` mode reads the plan and the stream
//! on stdin), so a hostile archive can do no more than the agent could; it is also hardened
//! on its own:
//!
//! - paths must be relative, without `..`, at most [`UnpackLimits::max_path`] bytes;
//! - no entry is written through a symlink: every parent is opened with `O_NOFOLLOW`, an
//!   existing leaf is replaced, never followed;
//! - hardlinks may only name a file this archive created;
//! - device nodes, FIFOs and other special entries are refused; setuid and setgid bits are
//!   dropped;
//! - total bytes, the compression ratio and the entry count are limited while reading.
//!
//! A refused entry is skipped and counted; a limit or a hash mismatch stops the restore with
//! an error.

use crate::pack::MODE_MASK;
use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::{BufRead, Read, Write};
use std::path::{Component, Path};
use std::process::ExitCode;

/// Limits of one restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnpackLimits {
    /// Most uncompressed bytes (tar stream, headers included).
    pub max_bytes: u64,
    /// Most uncompressed bytes per compressed byte (beyond [`ratio_slack`](Self::ratio_slack)).
    pub max_ratio: u64,
    /// Uncompressed bytes allowed before the ratio applies (small archives of empty files
    /// compress far better than 50:1).
    pub ratio_slack: u64,
    /// Most entries.
    pub max_entries: u64,
    /// Longest path, in bytes.
    pub max_path: usize,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        Self {
            max_bytes: 16 << 30,
            max_ratio: 50,
            ratio_slack: 64 << 20,
            max_entries: 500_000,
            max_path: 4096,
        }
    }
}

/// What the unpacker is told before the stream: the expected archive hash, the whiteouts
/// to apply first, and the limits. Sent as one JSON line ahead of the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnpackPlan {
    /// SHA-256 of the compressed archive.
    pub sha256: String,
    /// Paths to remove before unpacking (a delta's whiteouts).
    pub deleted: Vec<String>,
    /// The limits.
    pub limits: UnpackLimits,
}

/// What one restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnpackReport {
    /// Entries created.
    pub entries: u64,
    /// Uncompressed bytes read.
    pub bytes: u64,
    /// Entries refused (unsafe path, special file, hardlink out of the archive...).
    pub refused: u64,
    /// The first few reasons.
    pub reasons: Vec<String>,
    /// The archive hash computed while reading.
    pub sha256: String,
    /// Why the restore stopped, when it failed.
    pub error: Option<String>,
}

impl UnpackReport {
    fn refuse(&mut self, reason: String) {
        self.refused += 1;
        if self.reasons.len() < 16 {
            self.reasons.push(reason);
        }
    }
}

struct Metered<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.hasher.update(&buf[..read]);
        self.bytes += read as u64;
        Ok(read)
    }
}

/// The decompressed side: stops with an error once a limit is passed.
struct Limited<R> {
    inner: R,
    bytes: u64,
    compressed: std::rc::Rc<std::cell::Cell<u64>>,
    limits: UnpackLimits,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.bytes += read as u64;
        if self.bytes > self.limits.max_bytes {
            return Err(std::io::Error::other(format!(
                "archive exceeds {} uncompressed bytes",
                self.limits.max_bytes
            )));
        }
        let allowed = self
            .compressed
            .get()
            .saturating_mul(self.limits.max_ratio)
            .saturating_add(self.limits.ratio_slack);
        if self.bytes > allowed {
            return Err(std::io::Error::other(format!(
                "archive expands more than {}:1 (a compression bomb?)",
                self.limits.max_ratio
            )));
        }
        Ok(read)
    }
}

struct SharedMeter<R> {
    inner: Metered<R>,
    compressed: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for SharedMeter<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.compressed.set(self.inner.bytes);
        Ok(read)
    }
}

/// A validated relative path: its plain components.
fn components(path: &[u8], limits: &UnpackLimits) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(path).map_err(|_| "a path that is not UTF-8".to_owned())?;
    if text.len() > limits.max_path {
        return Err(format!("a path longer than {} bytes", limits.max_path));
    }
    if text.contains('\0') {
        return Err("a path with a NUL byte".to_owned());
    }
    let mut parts = Vec::new();
    for component in Path::new(text).components() {
        match component {
            Component::Normal(part) => {
                let part = part.to_str().unwrap_or_default();
                if part.len() > 255 {
                    return Err("a path component longer than 255 bytes".to_owned());
                }
                parts.push(part.to_owned());
            }
            Component::CurDir => {}
            Component::ParentDir => return Err(format!("{text:?} climbs out with `..`")),
            Component::RootDir | Component::Prefix(_) => return Err(format!("{text:?} is absolute")),
        }
    }
    if parts.is_empty() {
        return Err("an empty path".to_owned());
    }
    Ok(parts)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens (creating when missing) every parent of `parts` below `root`, never following a
/// symlink. Fails when a parent is not a real directory.
fn open_parent(root: &OwnedFd, parts: &[String]) -> Result<OwnedFd, String> {
    let mut dir =
        rustix::fs::openat(root, ".", dir_flags(), Mode::empty()).map_err(|err| format!("open root: {err}"))?;
    for part in &parts[..parts.len() - 1] {
        let next = match rustix::fs::openat(&dir, part.as_str(), dir_flags(), Mode::empty()) {
            Ok(next) => next,
            Err(rustix::io::Errno::NOENT) => {
                rustix::fs::mkdirat(&dir, part.as_str(), Mode::from_raw_mode(0o755))
                    .map_err(|err| format!("create {part}: {err}"))?;
                rustix::fs::openat(&dir, part.as_str(), dir_flags(), Mode::empty())
                    .map_err(|err| format!("open {part}: {err}"))?
            }
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                return Err(format!("{:?} goes through a symlink or a file", parts.join("/")));
            }
            Err(err) => return Err(format!("open {part}: {err}")),
        };
        dir = next;
    }
    Ok(dir)
}

/// Removes `name` in `dir` whatever it is (a directory recursively), never following links.
fn remove_at(dir: &OwnedFd, name: &str) -> Result<(), String> {
    let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(err) => return Err(format!("inspect {name}: {err}")),
    };
    if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
        let child =
            rustix::fs::openat(dir, name, dir_flags(), Mode::empty()).map_err(|err| format!("open {name}: {err}"))?;
        // Make it writable so its entries can go (we own everything we restore).
        let _ = rustix::fs::fchmod(&child, Mode::from_raw_mode(0o700));
        let mut names = Vec::new();
        let mut listing = rustix::fs::Dir::read_from(&child).map_err(|err| format!("list {name}: {err}"))?;
        while let Some(entry) = listing.read() {
            let entry = entry.map_err(|err| format!("list {name}: {err}"))?;
            let bytes = entry.file_name().to_bytes();
            if bytes != b"." && bytes != b".." {
                names.push(String::from_utf8_lossy(bytes).into_owned());
            }
        }
        for child_name in names {
            remove_at(&child, &child_name)?;
        }
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(|err| format!("remove {name}: {err}"))
    } else {
        rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(|err| format!("remove {name}: {err}"))
    }
}

/// Unpacks the zstd-compressed tar `input` into `root` following `plan`. See the module docs
/// for what is refused. The report's `error` is set when the restore stopped (a limit, a
/// malformed stream, a hash mismatch); what was written before stays.
pub fn unpack(input: impl Read, root: &Path, plan: &UnpackPlan) -> UnpackReport {
    let mut report = UnpackReport::default();
    if let Err(err) = unpack_inner(input, root, plan, &mut report) {
        report.error = Some(err);
    }
    report
}

fn unpack_inner(input: impl Read, root: &Path, plan: &UnpackPlan, report: &mut UnpackReport) -> Result<(), String> {
    let limits = plan.limits;
    let root_fd =
        rustix::fs::open(root, dir_flags(), Mode::empty()).map_err(|err| format!("open {}: {err}", root.display()))?;
    for deleted in &plan.deleted {
        match components(deleted.as_bytes(), &limits) {
            Ok(parts) => match open_parent(&root_fd, &parts) {
                Ok(parent) => remove_at(&parent, &parts[parts.len() - 1])?,
                Err(reason) => report.refuse(format!("whiteout: {reason}")),
            },
            Err(reason) => report.refuse(format!("whiteout: {reason}")),
        }
    }
    let compressed = std::rc::Rc::new(std::cell::Cell::new(0));
    let mut meter = SharedMeter {
        inner: Metered {
            inner: input,
            hasher: Sha256::new(),
            bytes: 0,
        },
        compressed: compressed.clone(),
    };
    let decoder = zstd::stream::read::Decoder::new(&mut meter).map_err(|err| format!("zstd: {err}"))?;
    let limited = Limited {
        inner: decoder,
        bytes: 0,
        compressed,
        limits,
    };
    let mut archive = tar::Archive::new(limited);
    let mut created: HashSet<String> = HashSet::new();
    let mut dir_modes: Vec<(Vec<String>, u32)> = Vec::new();
    let entries = archive.entries().map_err(|err| format!("read archive: {err}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|err| format!("read archive: {err}"))?;
        if report.entries + report.refused >= limits.max_entries {
            return Err(format!("archive has more than {} entries", limits.max_entries));
        }
        let path = entry.path_bytes().into_owned();
        let parts = match components(&path, &limits) {
            Ok(parts) => parts,
            Err(reason) => {
                report.refuse(reason);
                continue;
            }
        };
        let joined = parts.join("/");
        let header_mode = entry.header().mode().unwrap_or(0o644) & MODE_MASK;
        let mtime = entry.header().mtime().unwrap_or(0);
        let kind = entry.header().entry_type();
        let parent = match open_parent(&root_fd, &parts) {
            Ok(parent) => parent,
            Err(reason) => {
                report.refuse(reason);
                continue;
            }
        };
        let leaf = parts[parts.len() - 1].as_str();
        let existing = rustix::fs::statat(&parent, leaf, AtFlags::SYMLINK_NOFOLLOW).ok();
        let existing_dir = existing
            .as_ref()
            .is_some_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory);
        match kind {
            tar::EntryType::Directory => {
                if existing.is_some() && !existing_dir {
                    remove_at(&parent, leaf)?;
                }
                if !existing_dir {
                    rustix::fs::mkdirat(&parent, leaf, Mode::from_raw_mode(0o700))
                        .map_err(|err| format!("create {joined}: {err}"))?;
                }
                dir_modes.push((parts.clone(), header_mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if existing.is_some() {
                    remove_at(&parent, leaf)?;
                }
                let fd = rustix::fs::openat(
                    &parent,
                    leaf,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(|err| format!("create {joined}: {err}"))?;
                let mut file = std::fs::File::from(fd);
                std::io::copy(&mut entry, &mut file).map_err(|err| format!("write {joined}: {err}"))?;
                let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime);
                let _ = file.set_modified(when);
                rustix::fs::fchmod(&file, Mode::from_raw_mode(header_mode))
                    .map_err(|err| format!("chmod {joined}: {err}"))?;
                created.insert(joined);
            }
            tar::EntryType::Symlink => {
                let Some(target) = entry.link_name_bytes().map(|name| name.into_owned()) else {
                    report.refuse(format!("symlink {joined} without a target"));
                    continue;
                };
                if existing.is_some() {
                    remove_at(&parent, leaf)?;
                }
                rustix::fs::symlinkat(target.as_slice(), &parent, leaf)
                    .map_err(|err| format!("symlink {joined}: {err}"))?;
            }
            tar::EntryType::Link => {
                let Some(target) = entry.link_name_bytes().map(|name| name.into_owned()) else {
                    report.refuse(format!("hardlink {joined} without a target"));
                    continue;
                };
                let target_parts = match components(&target, &limits) {
                    Ok(target_parts) => target_parts,
                    Err(reason) => {
                        report.refuse(format!("hardlink {joined}: {reason}"));
                        continue;
                    }
                };
                let target_joined = target_parts.join("/");
                if !created.contains(&target_joined) {
                    report.refuse(format!(
                        "hardlink {joined} names {target_joined:?}, not a file of this archive"
                    ));
                    continue;
                }
                let target_parent = match open_parent(&root_fd, &target_parts) {
                    Ok(target_parent) => target_parent,
                    Err(reason) => {
                        report.refuse(format!("hardlink {joined}: {reason}"));
                        continue;
                    }
                };
                if existing.is_some() {
                    remove_at(&parent, leaf)?;
                }
                rustix::fs::linkat(
                    &target_parent,
                    target_parts[target_parts.len() - 1].as_str(),
                    &parent,
                    leaf,
                    AtFlags::empty(),
                )
                .map_err(|err| format!("hardlink {joined}: {err}"))?;
                created.insert(joined);
            }
            other => {
                report.refuse(format!("{joined}: {other:?} entries are never restored"));
                continue;
            }
        }
        report.entries += 1;
    }
    let mut limited = archive.into_inner();
    report.bytes = limited.bytes;
    // Drain the end of the stream (tar stops at its end blocks) so the whole archive is hashed.
    std::io::copy(&mut limited, &mut std::io::sink()).map_err(|err| format!("read archive: {err}"))?;
    drop(limited);
    std::io::copy(&mut meter, &mut std::io::sink()).map_err(|err| format!("read archive: {err}"))?;
    report.sha256 = hex::encode(meter.inner.hasher.clone().finalize());
    // Directory modes last (deepest first), so a read-only directory did not block its
    // entries.
    dir_modes.sort_by_key(|(parts, _)| std::cmp::Reverse(parts.len()));
    for (parts, mode) in dir_modes {
        if let Ok(parent) = open_parent(&root_fd, &parts)
            && let Ok(dir) = rustix::fs::openat(&parent, parts[parts.len() - 1].as_str(), dir_flags(), Mode::empty())
        {
            let _ = rustix::fs::fchmod(&dir, Mode::from_raw_mode(mode));
        }
    }
    if report.sha256 != plan.sha256 {
        return Err(format!(
            "archive hash {} does not match the manifest's {}: the snapshot is corrupt or was replaced",
            report.sha256, plan.sha256
        ));
    }
    Ok(())
}

/// How often [`unpack_main`] reports its progress: after each this many archive bytes read.
pub const PROGRESS_EVERY: u64 = 1 << 20;

/// The prefix of [`unpack_main`]'s progress lines (`consumed <bytes>`), which let the sender
/// keep only a bounded window of the archive in flight.
pub const PROGRESS_PREFIX: &str = "consumed ";

/// Counts what the unpacker has read and says so on stdout every [`PROGRESS_EVERY`] bytes.
struct Progress<R> {
    inner: R,
    read: u64,
    reported: u64,
}

impl<R: Read> Read for Progress<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.read += read as u64;
        if self.read - self.reported >= PROGRESS_EVERY {
            self.reported = self.read;
            let mut stdout = std::io::stdout().lock();
            // The sender only paces itself on these lines; a failed write shows as a missing
            // report at the end.
            let _ = writeln!(stdout, "{PROGRESS_PREFIX}{}", self.read);
            let _ = stdout.flush();
        }
        Ok(read)
    }
}

/// The `unpack` mode of the sandbox init: reads one JSON [`UnpackPlan`] line and then the
/// archive on stdin, unpacks into the working directory, and writes one JSON
/// [`UnpackReport`] line on stdout (after `consumed <bytes>` progress lines, one per
/// [`PROGRESS_EVERY`] archive bytes read). Exits 0 when the restore completed.
pub fn unpack_main() -> ExitCode {
    let stdin = std::io::stdin();
    let mut input = std::io::BufReader::with_capacity(1 << 20, stdin.lock());
    let mut line = Vec::new();
    let report = match input.read_until(b'\n', &mut line) {
        Ok(_) => match serde_json::from_slice::<UnpackPlan>(&line) {
            Ok(plan) => {
                let progress = Progress {
                    inner: &mut input,
                    read: 0,
                    reported: 0,
                };
                unpack(progress, Path::new("."), &plan)
            }
            Err(err) => UnpackReport {
                error: Some(format!("bad unpack plan: {err}")),
                ..UnpackReport::default()
            },
        },
        Err(err) => UnpackReport {
            error: Some(format!("read unpack plan: {err}")),
            ..UnpackReport::default()
        },
    };
    let failed = report.error.is_some();
    let mut stdout = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut stdout, &report);
    let _ = stdout.write_all(b"\n");
    let _ = stdout.flush();
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
