//! `harness-sandbox-init`: pid 1 of every namespace sandbox (see `harness_sandbox::init_main`).

fn main() -> std::process::ExitCode {
    // `unpack`: a snapshot restore, started by the init inside the sandbox (so confined and
    // as the sandbox uid); see `harness_sandbox::restore_in_sandbox`.
    if std::env::args().nth(1).as_deref() == Some("unpack") {
        return harness_snapshot::unpack_main();
    }
    harness_sandbox::init_main()
}
