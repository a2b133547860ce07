//! Sandbox start (bwrap, init, Landlock, seccomp, hello) and a warm exec round trip, on the
//! namespace backend. Run as root: `cargo bench -p harness-sandbox`.
//!
//! - `namespace_sandbox_start`: `create` until the sandbox answered its hello (usable); its
//!   shutdown happens outside the timed part.
//! - `namespace_sandbox_stop`: `shutdown` alone (the init's pipe closed, bwrap reaped, the
//!   uid released).
//! - `namespace_sandbox_start_and_stop`: both, as the first measurement (53 ms) did.
//! - `namespace_warm_exec_round_trip`: `true` in a live sandbox.
//!
//! `HARNESS_BENCH_PHASES=1` logs each start's split (`prepare_us`: uid, work tree, records;
//! `confined_us`: bubblewrap, the init's confinement and its hello) on stderr.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use harness_fs::ShellRequest;
use harness_sandbox::{CreateRequest, NamespaceConfig, NamespaceProvider, SandboxProvider};
use std::os::unix::fs::PermissionsExt;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::Builder::new()
        .prefix("hsbx-bench-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    // The init of this build profile (the bench profile: optimised, like an installed one).
    let init = std::path::PathBuf::from(env!("CARGO_BIN_EXE_harness-sandbox-init"));
    let init = std::env::var_os("HARNESS_SANDBOX_INIT").map_or(init, Into::into);
    let config = NamespaceConfig::new(init, scratch.path().join("state")).uid_range(232_000, 232_099);
    let provider = NamespaceProvider::new(config);
    let work = scratch.path().join("work");
    if std::env::var_os("HARNESS_BENCH_PHASES").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("harness_sandbox=debug"))
            .with_writer(std::io::stderr)
            .init();
    }
    c.bench_function("namespace_sandbox_start", |b| {
        b.iter_custom(|iterations| {
            let mut took = std::time::Duration::ZERO;
            for _ in 0..iterations {
                runtime.block_on(async {
                    let began = std::time::Instant::now();
                    let sandbox = provider
                        .create(CreateRequest::new(&work, "bench", "bench"))
                        .await
                        .unwrap();
                    took += began.elapsed();
                    sandbox.shutdown().await.unwrap();
                });
            }
            took
        });
    });
    c.bench_function("namespace_sandbox_stop", |b| {
        b.iter_custom(|iterations| {
            let mut took = std::time::Duration::ZERO;
            for _ in 0..iterations {
                runtime.block_on(async {
                    let sandbox = provider
                        .create(CreateRequest::new(&work, "bench", "bench"))
                        .await
                        .unwrap();
                    let began = std::time::Instant::now();
                    sandbox.shutdown().await.unwrap();
                    took += began.elapsed();
                });
            }
            took
        });
    });
    c.bench_function("namespace_sandbox_start_and_stop", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let sandbox = provider
                    .create(CreateRequest::new(&work, "bench", "bench"))
                    .await
                    .unwrap();
                sandbox.shutdown().await.unwrap();
            });
        });
    });
    let sandbox = runtime
        .block_on(provider.create(CreateRequest::new(&work, "bench", "bench")))
        .unwrap();
    let shell = sandbox.shell();
    c.bench_function("namespace_warm_exec_round_trip", |b| {
        b.iter(|| runtime.block_on(shell.execute(ShellRequest::new("true"))).unwrap());
    });
    runtime.block_on(sandbox.shutdown()).unwrap();
    restore_in_a_sandbox(c, &runtime, &provider, scratch.path());
}

fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The tree of the snapshot benchmark (`harness-snapshot`'s): deterministic files of mixed
/// compressibility, a third pseudo-random, the rest source-like text.
fn build_tree(root: &std::path::Path, total_mb: usize, files: usize) {
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

/// A whole restore as a session on another replica sees it: the head fetched from the
/// object store and verified, then unpacked inside a new sandbox by its init as the sandbox
/// uid (`HARNESS_SNAPSHOT_BENCH_MB` / `_FILES` shrink the ~500 MB / 24k-file tree). The
/// sandbox start is measured too (see `namespace_sandbox_start` for it alone).
fn restore_in_a_sandbox(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    provider: &NamespaceProvider,
    scratch: &std::path::Path,
) {
    use harness_snapshot::{BlobStore, Heads, SnapshotOptions, Snapshots, StoreConfig, WriterFence};
    let mb = size("HARNESS_SNAPSHOT_BENCH_MB", 500);
    let files = size("HARNESS_SNAPSHOT_BENCH_FILES", 24_000);
    let tree = scratch.join("tree");
    build_tree(&tree, mb, files);
    let objects = StoreConfig::Local {
        dir: scratch.join("objects"),
    }
    .open()
    .unwrap();
    let heads = Heads::new(std::sync::Arc::new(harness_store::InMemoryKv::default()));
    let snapshots = Snapshots::new(
        BlobStore::new(objects, "snapshots"),
        heads,
        scratch.join("spool"),
        SnapshotOptions::default(),
    );
    runtime
        .block_on(snapshots.persist("bench", &tree, &WriterFence::token(1)))
        .unwrap();
    let mut group = c.benchmark_group(format!("snapshot_{mb}mb_{files}files"));
    group
        .sample_size(10)
        .measurement_time(std::time::Duration::from_secs(60))
        .warm_up_time(std::time::Duration::from_secs(1));
    let mut round = 0;
    group.bench_function("restore_in_sandbox", |b| {
        b.iter_batched(
            || {
                round += 1;
                scratch.join(format!("restored{round}"))
            },
            |work| {
                runtime.block_on(async {
                    let restore = snapshots.fetch("bench").await.unwrap().unwrap();
                    let sandbox = provider
                        .create(CreateRequest::new(&work, "bench", "bench/restore"))
                        .await
                        .unwrap();
                    harness_sandbox::restore_in_sandbox(sandbox.as_ref(), &restore, Vec::new())
                        .await
                        .unwrap();
                    sandbox.shutdown().await.unwrap();
                });
                Removed(work)
            },
            criterion::BatchSize::PerIteration,
        );
    });
    group.finish();
}

/// A directory removed when dropped (after the measured routine returned it).
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
