//! `harness-sandbox-init`: pid 1 of every namespace sandbox, and its snapshot unpacker when
//! started with `unpack` (see `harness_sandbox::init_main`).

fn main() -> std::process::ExitCode {
    harness_sandbox::init_main()
}
