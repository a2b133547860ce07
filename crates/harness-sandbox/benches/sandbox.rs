//! Sandbox start (bwrap, init, Landlock, seccomp, hello) and a warm exec round trip, on the
//! namespace backend. Run as root: `cargo bench -p harness-sandbox`.
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
    c.bench_function("namespace_sandbox_start", |b| {
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
