//! Packing a work tree into a tar + zstd stream and its manifest (host side, read only).
//!
//! The walk never follows a symlink: every directory is opened relative to its parent's
//! descriptor with `O_NOFOLLOW | O_DIRECTORY` and every file with `O_NOFOLLOW`, then checked
//! with `fstat`, so an agent that swaps a directory for a symlink mid-walk cannot make the
//! host archive a file outside the work tree.

use crate::SnapshotError;
use crate::manifest::{ArchiveInfo, Entry, EntryKind, FORMAT, Manifest, TreeView};
use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::path::Path;

/// Excludes every snapshot skips unless configured otherwise: the sandbox's temporary and
/// cache directories and well-known build caches.
pub const DEFAULT_EXCLUDES: &[&str] = &[
    "/.tmp/",
    "/.harness-tmp/",
    "/.cache/",
    "node_modules/.cache/",
    "__pycache__/",
];

/// Permission bits kept: never setuid or setgid.
pub const MODE_MASK: u32 = 0o1777;

/// How to pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackOptions {
    /// Exclude patterns: `name` matches an entry of that name anywhere, `a/b` a path ending in
    /// those components, a leading `/` anchors at the root, a trailing `/` matches directories
    /// only.
    pub excludes: Vec<String>,
    /// zstd level.
    pub level: i32,
    /// zstd worker threads (0: compress on the calling thread).
    pub threads: u32,
}

impl Default for PackOptions {
    fn default() -> Self {
        Self {
            excludes: DEFAULT_EXCLUDES.iter().map(|pattern| (*pattern).to_owned()).collect(),
            level: 3,
            threads: 2,
        }
    }
}

struct Exclude {
    anchored: bool,
    dir_only: bool,
    components: Vec<String>,
}

impl Exclude {
    fn parse(pattern: &str) -> Option<Self> {
        let anchored = pattern.starts_with('/');
        let dir_only = pattern.ends_with('/');
        let components: Vec<String> = pattern
            .split('/')
            .filter(|part| !part.is_empty())
            .map(str::to_owned)
            .collect();
        (!components.is_empty()).then_some(Self {
            anchored,
            dir_only,
            components,
        })
    }

    fn matches(&self, path: &[&str], is_dir: bool) -> bool {
        if self.dir_only && !is_dir {
            return false;
        }
        let n = self.components.len();
        if path.len() < n || (self.anchored && path.len() != n) {
            return false;
        }
        path[path.len() - n..]
            .iter()
            .zip(&self.components)
            .all(|(have, want)| have == want)
    }
}

/// Counts and hashes what passes through.
pub(crate) struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    pub(crate) fn finish(self) -> (W, String, u64) {
        (self.inner, hex::encode(self.hasher.finalize()), self.bytes)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.hasher.update(&buf[..read]);
        Ok(read)
    }
}

/// What to pack: the identity of the new snapshot and, for a delta, its base.
#[derive(Debug, Clone, Copy)]
pub struct PackRequest<'a> {
    /// The new snapshot's id.
    pub id: &'a str,
    /// For a delta: the base snapshot's id and the tree its chain restores.
    pub base: Option<(&'a str, &'a TreeView)>,
    /// Creation time recorded in the manifest (milliseconds since the epoch).
    pub created_ms: i64,
}

struct Walker<'a, W: Write> {
    builder: tar::Builder<W>,
    excludes: Vec<Exclude>,
    base: Option<&'a TreeView>,
    entries: Vec<Entry>,
    seen: BTreeSet<String>,
    links: HashMap<(u64, u64), String>,
    uncompressed: u64,
    skipped: u64,
}

fn io<'a>(operation: &'static str, path: &'a str) -> impl FnOnce(std::io::Error) -> SnapshotError + 'a {
    move |source| SnapshotError::Io {
        operation,
        path: path.to_owned(),
        source,
    }
}

fn errno<'a>(operation: &'static str, path: &'a str) -> impl FnOnce(rustix::io::Errno) -> SnapshotError + 'a {
    move |err| SnapshotError::Io {
        operation,
        path: path.to_owned(),
        source: err.into(),
    }
}

/// Packs the tree under `root` into `out` (tar + zstd) and returns its manifest. With a base,
/// only what changed since it is packed (files whose size, mtime or mode changed and whose
/// content differs, new directories, new symlinks) plus whiteouts for what is gone.
///
/// Never archived: device nodes, FIFOs, sockets, names that are not UTF-8 (logged), excluded
/// paths; setuid and setgid bits are dropped.
///
/// # Errors
/// [`SnapshotError::Io`] naming the path that could not be read or written.
pub fn pack<W: Write>(
    root: &Path,
    request: PackRequest<'_>,
    options: &PackOptions,
    out: W,
) -> Result<(Manifest, W), SnapshotError> {
    let root_text = root.display().to_string();
    let root_fd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno("open work tree", &root_text))?;
    let hashing = HashingWriter::new(out);
    let mut encoder =
        zstd::stream::write::Encoder::new(hashing, options.level).map_err(io("start zstd", &root_text))?;
    if options.threads > 0 {
        encoder
            .multithread(options.threads)
            .map_err(io("start zstd workers", &root_text))?;
    }
    let mut builder = tar::Builder::new(encoder);
    builder.mode(tar::HeaderMode::Complete);
    builder.follow_symlinks(false);
    let mut walker = Walker {
        builder,
        excludes: options
            .excludes
            .iter()
            .filter_map(|pattern| Exclude::parse(pattern))
            .collect(),
        base: request.base.map(|(_, view)| view),
        entries: Vec::new(),
        seen: BTreeSet::new(),
        links: HashMap::new(),
        uncompressed: 0,
        skipped: 0,
    };
    walker.walk(&root_fd, &mut Vec::new())?;
    if walker.skipped > 0 {
        tracing::debug!(skipped = walker.skipped, "snapshot skipped special files");
    }
    let deleted = match walker.base {
        Some(view) => whiteouts(view, &walker.seen),
        None => Vec::new(),
    };
    let entries_count = walker.entries.len() as u64;
    let uncompressed = walker.uncompressed;
    let entries = std::mem::take(&mut walker.entries);
    let encoder = walker.builder.into_inner().map_err(io("finish tar", &root_text))?;
    let hashing = encoder.finish().map_err(io("finish zstd", &root_text))?;
    let (mut out, sha256, bytes) = hashing.finish();
    out.flush().map_err(io("flush archive", &root_text))?;
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        id: request.id.to_owned(),
        base: request.base.map(|(id, _)| id.to_owned()),
        created_ms: request.created_ms,
        backend: String::new(),
        policy_hash: String::new(),
        projection_hash: String::new(),
        archive: ArchiveInfo {
            sha256,
            bytes,
            uncompressed,
            entries: entries_count,
        },
        entries,
        deleted,
    };
    Ok((manifest, out))
}

/// The topmost paths of `base` that are no longer present.
fn whiteouts(base: &TreeView, seen: &BTreeSet<String>) -> Vec<String> {
    let mut deleted: Vec<String> = Vec::new();
    for path in base.entries.keys() {
        if seen.contains(path) {
            continue;
        }
        if deleted
            .last()
            .is_some_and(|parent| path.starts_with(parent.as_str()) && path.as_bytes().get(parent.len()) == Some(&b'/'))
        {
            continue;
        }
        deleted.push(path.clone());
    }
    deleted
}

impl<W: Write> Walker<'_, W> {
    fn excluded(&self, components: &[&str], is_dir: bool) -> bool {
        self.excludes.iter().any(|exclude| exclude.matches(components, is_dir))
    }

    fn walk(&mut self, dir: &OwnedFd, prefix: &mut Vec<String>) -> Result<(), SnapshotError> {
        let here = prefix.join("/");
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut listing = rustix::fs::Dir::read_from(dir).map_err(errno("list directory", &here))?;
        while let Some(entry) = listing.read() {
            let entry = entry.map_err(errno("list directory", &here))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        names.sort();
        for name in names {
            let Ok(name) = String::from_utf8(name) else {
                self.skipped += 1;
                tracing::warn!(dir = %here, "snapshot skips a name that is not UTF-8");
                continue;
            };
            let stat = match rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                // Removed while we walk: it is simply not in the snapshot.
                Err(rustix::io::Errno::NOENT) => continue,
                Err(err) => return Err(errno("inspect", &here)(err)),
            };
            let file_type = FileType::from_raw_mode(stat.st_mode);
            prefix.push(name.clone());
            let path = prefix.join("/");
            let components: Vec<&str> = prefix.iter().map(String::as_str).collect();
            let is_dir = file_type == FileType::Directory;
            if self.excluded(&components, is_dir) {
                prefix.pop();
                continue;
            }
            let mode = (stat.st_mode as u32) & MODE_MASK;
            let mtime = stat.st_mtime as i64;
            let mtime_nsec = stat.st_mtime_nsec as u32;
            match file_type {
                FileType::Directory => {
                    let child = rustix::fs::openat(
                        dir,
                        name.as_str(),
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    );
                    let child = match child {
                        Ok(child) => child,
                        Err(rustix::io::Errno::NOENT) => {
                            prefix.pop();
                            continue;
                        }
                        Err(err) => return Err(errno("open directory", &path)(err)),
                    };
                    let entry = Entry {
                        path: path.clone(),
                        kind: EntryKind::Dir,
                        mode,
                        size: 0,
                        mtime,
                        mtime_nsec: 0,
                        sha256: None,
                        target: None,
                    };
                    self.seen.insert(path.clone());
                    let unchanged = self
                        .base
                        .and_then(|base| base.entries.get(&path))
                        .is_some_and(|old| old.kind == EntryKind::Dir && old.mode == mode);
                    if !unchanged {
                        let mut header = tar::Header::new_gnu();
                        header.set_entry_type(tar::EntryType::Directory);
                        header.set_mode(mode);
                        header.set_mtime(mtime.max(0) as u64);
                        header.set_size(0);
                        self.builder
                            .append_data(&mut header, format!("{path}/"), std::io::empty())
                            .map_err(io("write archive", &path))?;
                        self.entries.push(entry);
                    }
                    self.walk(&child, prefix)?;
                }
                FileType::Symlink => {
                    let target = match rustix::fs::readlinkat(dir, name.as_str(), Vec::new()) {
                        Ok(target) => target,
                        Err(rustix::io::Errno::NOENT) => {
                            prefix.pop();
                            continue;
                        }
                        Err(err) => return Err(errno("read symlink", &path)(err)),
                    };
                    let Ok(target) = target.into_string() else {
                        self.skipped += 1;
                        prefix.pop();
                        continue;
                    };
                    self.seen.insert(path.clone());
                    let unchanged = self.base.and_then(|base| base.entries.get(&path)).is_some_and(|old| {
                        old.kind == EntryKind::Symlink && old.target.as_deref() == Some(target.as_str())
                    });
                    if !unchanged {
                        let mut header = tar::Header::new_gnu();
                        header.set_entry_type(tar::EntryType::Symlink);
                        header.set_mode(0o777);
                        header.set_mtime(mtime.max(0) as u64);
                        header.set_size(0);
                        append_link(&mut self.builder, &mut header, &path, &target)
                            .map_err(io("write archive", &path))?;
                        self.entries.push(Entry {
                            path: path.clone(),
                            kind: EntryKind::Symlink,
                            mode: 0,
                            size: 0,
                            mtime,
                            mtime_nsec: 0,
                            sha256: None,
                            target: Some(target),
                        });
                    }
                }
                FileType::RegularFile => {
                    self.seen.insert(path.clone());
                    self.file(dir, &name, &path, &stat, mode, mtime, mtime_nsec)?;
                }
                _ => self.skipped += 1,
            }
            prefix.pop();
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn file(
        &mut self,
        dir: &OwnedFd,
        name: &str,
        path: &str,
        stat: &rustix::fs::Stat,
        mode: u32,
        mtime: i64,
        mtime_nsec: u32,
    ) -> Result<(), SnapshotError> {
        let size = stat.st_size as u64;
        let identity = (stat.st_dev, stat.st_ino);
        let old = self.base.and_then(|base| base.entries.get(path));
        if let Some(old) = old
            && old.kind == EntryKind::File
            && old.size == size
            && old.mtime == mtime
            && old.mtime_nsec == mtime_nsec
            && old.mode == mode
        {
            return Ok(());
        }
        if stat.st_nlink > 1
            && let Some(original) = self.links.get(&identity).cloned()
        {
            let sha256 = self
                .entries
                .iter()
                .rev()
                .find(|entry| entry.path == original)
                .and_then(|entry| entry.sha256.clone());
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Link);
            header.set_mode(mode);
            header.set_mtime(mtime.max(0) as u64);
            header.set_size(0);
            append_link(&mut self.builder, &mut header, path, &original).map_err(io("write archive", path))?;
            self.entries.push(Entry {
                path: path.to_owned(),
                kind: EntryKind::Hardlink,
                mode,
                size,
                mtime,
                mtime_nsec,
                sha256,
                target: Some(original),
            });
            return Ok(());
        }
        let open = || {
            rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno("open file", path))
        };
        let fd = open()?;
        let checked = rustix::fs::fstat(&fd).map_err(errno("inspect file", path))?;
        if FileType::from_raw_mode(checked.st_mode) != FileType::RegularFile || checked.st_ino != stat.st_ino {
            // Swapped while we looked: skip it rather than read something else.
            self.skipped += 1;
            return Ok(());
        }
        if let Some(old) = old
            && old.kind == EntryKind::File
            && old.size == size
            && old.mode == mode
            && old.mtime == mtime
        {
            // Only the sub-second mtime changed (a restored file): keep it only when the
            // content did too.
            let mut hasher = Sha256::new();
            let mut file = std::fs::File::from(fd);
            std::io::copy(&mut (&mut file).take(size), &mut HashWrite(&mut hasher)).map_err(io("read file", path))?;
            if old.mtime == mtime && old.sha256.as_deref() == Some(hex::encode(hasher.finalize()).as_str()) {
                return Ok(());
            }
            drop(file);
            return self.append_file(
                open()?,
                path,
                size,
                mode,
                mtime,
                mtime_nsec,
                identity,
                stat.st_nlink > 1,
            );
        }
        self.append_file(fd, path, size, mode, mtime, mtime_nsec, identity, stat.st_nlink > 1)
    }

    #[allow(clippy::too_many_arguments)]
    fn append_file(
        &mut self,
        fd: OwnedFd,
        path: &str,
        size: u64,
        mode: u32,
        mtime: i64,
        mtime_nsec: u32,
        identity: (u64, u64),
        linked: bool,
    ) -> Result<(), SnapshotError> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(mode);
        header.set_mtime(mtime.max(0) as u64);
        header.set_size(size);
        let file = std::fs::File::from(fd);
        // A file that shrinks while read is padded with zeros so the archive stays well formed
        // (its hash says what was archived); one that grows is cut at the size seen.
        let mut reader = HashingReader {
            inner: file.take(size).chain(std::io::repeat(0)).take(size),
            hasher: Sha256::new(),
        };
        self.builder
            .append_data(&mut header, path, &mut reader)
            .map_err(io("write archive", path))?;
        self.uncompressed += size;
        if linked {
            self.links.insert(identity, path.to_owned());
        }
        self.entries.push(Entry {
            path: path.to_owned(),
            kind: EntryKind::File,
            mode,
            size,
            mtime,
            mtime_nsec,
            sha256: Some(hex::encode(reader.hasher.finalize())),
            target: None,
        });
        Ok(())
    }
}

/// Appends a link entry whose target is kept byte for byte (the tar crate's own
/// `append_link` normalises it): a GNU long-link entry first when it is long.
fn append_link<W: Write>(
    builder: &mut tar::Builder<W>,
    header: &mut tar::Header,
    path: &str,
    target: &str,
) -> std::io::Result<()> {
    let bytes = target.as_bytes();
    if bytes.len() >= 100 {
        let mut long = tar::Header::new_gnu();
        let name = b"././@LongLink";
        if let Some(gnu) = long.as_gnu_mut() {
            gnu.name[..name.len()].copy_from_slice(name);
        }
        long.set_mode(0o644);
        long.set_entry_type(tar::EntryType::GNULongLink);
        long.set_size(bytes.len() as u64 + 1);
        long.set_cksum();
        builder.append(&long, bytes.chain(&[0u8][..]))?;
        header.set_link_name_literal(&bytes[..99])?;
    } else {
        header.set_link_name_literal(bytes)?;
    }
    builder.append_data(header, path, std::io::empty())
}

struct HashWrite<'a>(&'a mut Sha256);

impl Write for HashWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
