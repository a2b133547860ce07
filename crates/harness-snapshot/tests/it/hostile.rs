//! Hostile archives (the agent produced the last snapshot, so it may have crafted it): after
//! an import every canary outside the work tree is intact and every limit holds.

use harness_snapshot::{UnpackLimits, UnpackPlan, UnpackReport, unpack};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

struct Arena {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    canary: PathBuf,
}

const CANARY: &[u8] = b"canary: untouched";

fn arena() -> Arena {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().join("work");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(&outside).unwrap_or_else(|e| panic!("{e}"));
    let canary = outside.join("canary");
    std::fs::write(&canary, CANARY).unwrap_or_else(|e| panic!("{e}"));
    Arena {
        _dir: dir,
        root,
        outside,
        canary,
    }
}

impl Arena {
    fn assert_intact(&self) {
        assert_eq!(std::fs::read(&self.canary).unwrap_or_else(|e| panic!("{e}")), CANARY);
        let names: Vec<_> = std::fs::read_dir(&self.outside)
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|entry| entry.unwrap_or_else(|e| panic!("{e}")).file_name())
            .collect();
        assert_eq!(names, ["canary"], "nothing new outside the work tree");
        let meta = std::fs::metadata(&self.canary).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
    }
}

/// A raw tar, bypassing the tar crate's path checks (names and link names as bytes).
struct Raw(tar::Builder<Vec<u8>>);

impl Raw {
    fn new() -> Self {
        Self(tar::Builder::new(Vec::new()))
    }

    fn entry(&mut self, kind: tar::EntryType, name: &[u8], link: &[u8], mode: u32, data: &[u8]) -> &mut Self {
        let mut header = tar::Header::new_gnu();
        header.as_gnu_mut().unwrap_or_else(|| panic!("gnu")).name[..name.len()].copy_from_slice(name);
        header.as_gnu_mut().unwrap_or_else(|| panic!("gnu")).linkname[..link.len()].copy_from_slice(link);
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        header.set_cksum();
        self.0.append(&header, data).unwrap_or_else(|e| panic!("{e}"));
        self
    }

    fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.entry(tar::EntryType::Regular, name.as_bytes(), b"", 0o644, data)
    }

    fn finish(self) -> Vec<u8> {
        compress(&self.0.into_inner().unwrap_or_else(|e| panic!("{e}")))
    }
}

fn compress(tar: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(tar, 3).unwrap_or_else(|e| panic!("{e}"))
}

fn plan(archive: &[u8], limits: UnpackLimits) -> UnpackPlan {
    UnpackPlan {
        sha256: hex::encode(Sha256::digest(archive)),
        deleted: Vec::new(),
        limits,
    }
}

fn import(arena: &Arena, archive: &[u8]) -> UnpackReport {
    unpack(archive, &arena.root, &plan(archive, UnpackLimits::default()))
}

#[test]
fn dot_dot_and_absolute_paths_are_refused() {
    let arena = arena();
    let absolute = arena.canary.display().to_string();
    let mut raw = Raw::new();
    raw.file("../outside/canary", b"owned")
        .file("a/../../outside/new", b"owned")
        .file(&absolute, b"owned")
        .file("ok.txt", b"fine");
    let report = import(&arena, &raw.finish());
    assert_eq!(report.error, None);
    assert_eq!(report.refused, 3, "{report:?}");
    assert_eq!(report.entries, 1);
    assert!(arena.root.join("ok.txt").is_file());
    arena.assert_intact();
}

#[test]
fn a_symlink_then_a_file_through_it_is_refused() {
    let arena = arena();
    let outside = arena.outside.display().to_string();
    let mut raw = Raw::new();
    raw.entry(tar::EntryType::Symlink, b"escape", outside.as_bytes(), 0o777, b"")
        .file("escape/canary", b"owned")
        .file("escape/new", b"owned")
        // A symlink named like the canary's parent inside a nested dir, then a write.
        .entry(tar::EntryType::Directory, b"d/", b"", 0o755, b"")
        .entry(tar::EntryType::Symlink, b"d/sub", b"../../outside", 0o777, b"")
        .file("d/sub/canary", b"owned");
    let report = import(&arena, &raw.finish());
    assert_eq!(report.error, None);
    assert_eq!(report.refused, 3, "{report:?}");
    // The symlinks themselves are kept (as the agent made them); nothing went through them.
    assert!(
        arena
            .root
            .join("escape")
            .symlink_metadata()
            .is_ok_and(|meta| meta.file_type().is_symlink())
    );
    arena.assert_intact();
}

#[test]
fn an_existing_symlink_is_replaced_not_followed() {
    let arena = arena();
    std::os::unix::fs::symlink(&arena.canary, arena.root.join("notes")).unwrap_or_else(|e| panic!("{e}"));
    let mut raw = Raw::new();
    raw.file("notes", b"the agent's notes");
    let report = import(&arena, &raw.finish());
    assert_eq!((report.error.as_deref(), report.refused), (None, 0));
    assert_eq!(
        std::fs::read(arena.root.join("notes")).unwrap_or_else(|e| panic!("{e}")),
        b"the agent's notes"
    );
    arena.assert_intact();
}

#[test]
fn hardlinks_to_host_files_are_refused() {
    let arena = arena();
    let absolute = arena.canary.display().to_string();
    let mut raw = Raw::new();
    raw.entry(tar::EntryType::Link, b"abs", absolute.as_bytes(), 0o644, b"")
        .entry(tar::EntryType::Link, b"rel", b"../outside/canary", 0o644, b"")
        .entry(tar::EntryType::Link, b"unknown", b"never-archived", 0o644, b"")
        // Then write through the names, as a second stage of the attack would.
        .file("abs", b"owned")
        .file("rel", b"owned")
        .file("kept", b"a file of the archive")
        .entry(tar::EntryType::Link, b"alias", b"kept", 0o644, b"");
    let report = import(&arena, &raw.finish());
    assert_eq!(report.error, None);
    assert_eq!(report.refused, 3, "{report:?}");
    assert_eq!(
        std::fs::read(arena.root.join("alias")).unwrap_or_else(|e| panic!("{e}")),
        b"a file of the archive"
    );
    arena.assert_intact();
}

#[test]
fn device_nodes_fifos_and_setuid_bits_are_never_restored() {
    let arena = arena();
    let mut raw = Raw::new();
    raw.entry(tar::EntryType::Char, b"null", b"", 0o666, b"")
        .entry(tar::EntryType::Block, b"sda", b"", 0o660, b"")
        .entry(tar::EntryType::Fifo, b"pipe", b"", 0o644, b"")
        .entry(tar::EntryType::Regular, b"suid", b"", 0o6755, b"#!/bin/sh\n")
        .entry(tar::EntryType::Directory, b"sgid-dir/", b"", 0o2775, b"");
    let report = import(&arena, &raw.finish());
    assert_eq!(report.error, None);
    assert_eq!(report.refused, 3, "{report:?}");
    for name in ["null", "sda", "pipe"] {
        assert!(arena.root.join(name).symlink_metadata().is_err(), "{name} was created");
    }
    let mode = |name: &str| {
        std::fs::metadata(arena.root.join(name))
            .unwrap_or_else(|e| panic!("{e}"))
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("suid"), 0o755);
    assert_eq!(mode("sgid-dir"), 0o775);
    arena.assert_intact();
}

#[test]
fn a_compression_bomb_stops_at_the_ratio_limit() {
    let arena = arena();
    // 4 GiB of zeros as one file, streamed through the encoder (never held in memory).
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap_or_else(|e| panic!("{e}"));
    {
        let mut builder = tar::Builder::new(&mut encoder);
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(4 << 30);
        header.set_path("bomb").unwrap_or_else(|e| panic!("{e}"));
        header.set_cksum();
        builder
            .append(&header, std::io::Read::take(std::io::repeat(0), 4 << 30))
            .unwrap_or_else(|e| panic!("{e}"));
        builder.finish().unwrap_or_else(|e| panic!("{e}"));
    }
    let archive = encoder.finish().unwrap_or_else(|e| panic!("{e}"));
    assert!(archive.len() < 1 << 20, "the bomb is small: {}", archive.len());
    let limits = UnpackLimits::default();
    let report = unpack(archive.as_slice(), &arena.root, &plan(&archive, limits));
    let error = report.error.unwrap_or_default();
    assert!(error.contains("expands more than 50:1"), "{error}");
    let written = std::fs::metadata(arena.root.join("bomb")).map_or(0, |meta| meta.len());
    assert!(written <= limits.ratio_slack + 50 * archive.len() as u64, "{written}");
    arena.assert_intact();
}

#[test]
fn the_total_byte_limit_holds() {
    let arena = arena();
    let data = vec![1u8; 3 << 20];
    let mut raw = Raw::new();
    raw.file("a", &data).file("b", &data);
    let archive = raw.finish();
    let limits = UnpackLimits {
        max_bytes: 4 << 20,
        ..UnpackLimits::default()
    };
    let report = unpack(archive.as_slice(), &arena.root, &plan(&archive, limits));
    assert!(
        report
            .error
            .unwrap_or_default()
            .contains("exceeds 4194304 uncompressed bytes")
    );
    arena.assert_intact();
}

#[test]
fn a_million_entries_stop_at_the_entry_limit() {
    let arena = arena();
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap_or_else(|e| panic!("{e}"));
    {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        header.set_path("d/").unwrap_or_else(|e| panic!("{e}"));
        header.set_cksum();
        let block = header.as_bytes().to_vec();
        for _ in 0..1_000_000 {
            encoder.write_all(&block).unwrap_or_else(|e| panic!("{e}"));
        }
        encoder.write_all(&[0u8; 1024]).unwrap_or_else(|e| panic!("{e}"));
    }
    let archive = encoder.finish().unwrap_or_else(|e| panic!("{e}"));
    let limits = UnpackLimits {
        // A million 512-byte headers compress far beyond 50:1; only the entry limit is tested.
        ratio_slack: 1 << 40,
        ..UnpackLimits::default()
    };
    let report = unpack(archive.as_slice(), &arena.root, &plan(&archive, limits));
    assert!(
        report.error.unwrap_or_default().contains("more than 500000 entries"),
        "{:?}",
        report.entries
    );
    assert_eq!(report.entries, 500_000);
    arena.assert_intact();
}

#[test]
fn over_long_paths_are_refused() {
    let arena = arena();
    let long = vec!["p".repeat(200); 25].join("/");
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o644);
    header.set_size(1);
    builder
        .append_data(&mut header, &long, &b"x"[..])
        .unwrap_or_else(|e| panic!("{e}"));
    let archive = compress(&builder.into_inner().unwrap_or_else(|e| panic!("{e}")));
    let report = import(&arena, &archive);
    assert_eq!(report.error, None);
    assert_eq!(report.refused, 1);
    assert!(report.reasons[0].contains("longer than 4096"), "{:?}", report.reasons);
    arena.assert_intact();
}

#[test]
fn a_tampered_archive_fails_its_hash() {
    let arena = arena();
    let mut raw = Raw::new();
    raw.file("a", b"original");
    let archive = raw.finish();
    let expected = plan(&archive, UnpackLimits::default());
    let mut other = Raw::new();
    other.file("a", b"replaced");
    let replaced = other.finish();
    let report = unpack(replaced.as_slice(), &arena.root, &expected);
    assert!(report.error.unwrap_or_default().contains("does not match the manifest"));
}

#[test]
fn whiteouts_cannot_leave_the_work_tree() {
    let arena = arena();
    let mut raw = Raw::new();
    raw.file("x", b"x");
    let archive = raw.finish();
    std::os::unix::fs::symlink(&arena.outside, arena.root.join("link")).unwrap_or_else(|e| panic!("{e}"));
    let mut plan = plan(&archive, UnpackLimits::default());
    plan.deleted = vec![
        "../outside/canary".to_owned(),
        arena.canary.display().to_string(),
        "link/canary".to_owned(),
        "link".to_owned(),
    ];
    let report = unpack(archive.as_slice(), &arena.root, &plan);
    assert_eq!(report.error, None);
    assert_eq!(report.refused, 3, "{report:?}");
    assert!(
        arena.root.join("link").symlink_metadata().is_err(),
        "the symlink itself goes"
    );
    arena.assert_intact();
}
