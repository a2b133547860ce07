//! Snapshot benchmarks: a full snapshot and a restore of a ~500 MB / 24k-file tree, and a
//! delta after a one-file change. `HARNESS_SNAPSHOT_BENCH_MB` / `_FILES` shrink the tree.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use harness_snapshot::{PackOptions, PackRequest, TreeView, UnpackLimits, UnpackPlan, pack, unpack};
use std::path::Path;
use std::time::Duration;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Files of mixed compressibility (source-like text and binary blobs).
fn build_tree(root: &Path, total_mb: usize, files: usize) {
    let per_file = total_mb * (1 << 20) / files;
    let mut state: u64 = 42;
    for index in 0..files {
        let dir = root.join(format!("pkg{:03}/mod{:02}", index % 400, (index / 400) % 60));
        std::fs::create_dir_all(&dir).unwrap();
        let mut data = Vec::with_capacity(per_file);
        if index % 3 == 0 {
            while data.len() < per_file {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                data.extend_from_slice(&state.to_le_bytes());
            }
        } else {
            while data.len() < per_file {
                data.extend_from_slice(
                    format!("fn item_{index}_{}() {{ return {}; }}\n", data.len(), data.len() % 97).as_bytes(),
                );
            }
        }
        data.truncate(per_file);
        std::fs::write(dir.join(format!("file{index}.rs")), data).unwrap();
    }
}

/// A directory removed when dropped (after the measured routine returned it).
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn options() -> PackOptions {
    PackOptions::default()
}

fn bench(c: &mut Criterion) {
    let mb = env("HARNESS_SNAPSHOT_BENCH_MB", 500);
    let files = env("HARNESS_SNAPSHOT_BENCH_FILES", 24_000);
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    build_tree(&tree, mb, files);
    let spool = dir.path().join("full.tar.zst");
    let mut group = c.benchmark_group(format!("snapshot_{mb}mb_{files}files"));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .warm_up_time(Duration::from_secs(1));
    let request = PackRequest {
        id: "full",
        base: None,
        created_ms: 0,
    };
    group.bench_function("full_snapshot", |b| {
        b.iter(|| {
            let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&spool).unwrap());
            pack(&tree, request, &options(), file).unwrap()
        });
    });
    let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&spool).unwrap());
    let (manifest, _) = pack(&tree, request, &options(), file).unwrap();
    let plan = UnpackPlan {
        sha256: manifest.archive.sha256.clone(),
        deleted: Vec::new(),
        limits: UnpackLimits::default(),
    };
    let mut round = 0;
    // Each restore goes to a fresh directory; removing it is outside the measurement.
    group.bench_function("restore", |b| {
        b.iter_batched(
            || {
                round += 1;
                let target = Removed(dir.path().join(format!("restore{round}")));
                std::fs::create_dir_all(&target.0).unwrap();
                target
            },
            |target| {
                let input = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&spool).unwrap());
                let report = unpack(input, &target.0, &plan);
                assert_eq!(report.error, None);
                target
            },
            criterion::BatchSize::PerIteration,
        );
    });
    let view = TreeView::of(&manifest);
    let changed = tree.join("pkg000/mod00/file0.rs");
    let mut tick = 0u32;
    group.bench_function("delta_after_one_file_change", |b| {
        b.iter(|| {
            tick += 1;
            std::fs::write(&changed, format!("changed {tick}")).unwrap();
            let request = PackRequest {
                id: "delta",
                base: Some(("full", &view)),
                created_ms: 0,
            };
            let (delta, _) = pack(&tree, request, &options(), Vec::new()).unwrap();
            assert_eq!(delta.entries.len(), 1);
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
