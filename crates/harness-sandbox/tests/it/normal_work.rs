//! "Normal work still runs": what a developer does in a work tree works inside the offline
//! sandbox, with Debian's toolchains under /usr.

use crate::support::Fixture;
use harness_fs::ShellRequest;

#[tokio::test]
async fn git_heredocs_make_and_mktemp() {
    let fixture = Fixture::new().await;
    fixture
        .ok("git init -q repo && cd repo && git config user.email t@example.invalid && git config user.name t && cat > notes.md <<'DOC'\n# héllo\nline two\nDOC\ngit add notes.md && git commit -qm first && git log --oneline | wc -l")
        .await;
    fixture
        .ok("f=$(mktemp) && echo tmp > \"$f\" && cat \"$f\" && echo x > /dev/null && head -c 4 /dev/urandom | wc -c")
        .await;
    let make = fixture
        .ok("mkdir -p mk && cd mk && printf 'all: out.txt\\nout.txt:\\n\\techo built > out.txt\\n' > Makefile && make -s && cat out.txt")
        .await;
    assert_eq!(make.stdout, "built\n");
    fixture.stop().await;
}

#[tokio::test]
async fn python_venv_with_a_local_wheel() {
    let fixture = Fixture::new().await;
    let setup = "mkdir -p pkg/hello_pkg && cd pkg && printf 'def hi():\\n    return \"hi from wheel\"\\n' > hello_pkg/__init__.py && printf '[build-system]\\nrequires = [\"setuptools\"]\\nbuild-backend = \"setuptools.build_meta\"\\n[project]\\nname = \"hello-pkg\"\\nversion = \"0.1\"\\n' > pyproject.toml && python3 -m pip wheel --no-deps --no-build-isolation --no-index -q -w ../dist . ";
    fixture.ok(setup).await;
    let output = fixture
        .ok("python3 -m venv .venv && .venv/bin/pip install -q --no-index dist/hello_pkg-0.1-py3-none-any.whl && .venv/bin/python -c 'import hello_pkg; print(hello_pkg.hi())'")
        .await;
    assert!(output.stdout.ends_with("hi from wheel\n"), "{output:?}");
    fixture.stop().await;
}

#[tokio::test]
async fn npm_install_of_a_local_tarball() {
    let fixture = Fixture::new().await;
    fixture
        .ok("mkdir -p lib && cd lib && printf '{\"name\":\"local-lib\",\"version\":\"1.0.0\",\"bin\":{\"local-lib\":\"cli.js\"},\"main\":\"index.js\"}' > package.json && echo 'module.exports = () => \"from tarball\";' > index.js && printf '#!/usr/bin/env node\\nconsole.log(require(\"./index.js\")())\\n' > cli.js && npm pack --silent >/dev/null")
        .await;
    let output = fixture
        .ok("mkdir -p app && cd app && echo '{\"name\":\"app\",\"version\":\"1.0.0\"}' > package.json && npm install --offline --no-audit --no-fund --silent ../lib/local-lib-1.0.0.tgz && node -e 'console.log(require(\"local-lib\")())' && ./node_modules/.bin/local-lib")
        .await;
    assert!(output.stdout.ends_with("from tarball\nfrom tarball\n"), "{output:?}");
    fixture.stop().await;
}

#[tokio::test]
async fn cargo_build_offline_of_a_tiny_crate() {
    let fixture = Fixture::new().await;
    let output = fixture
        .ok("cargo new -q --vcs none tiny && cd tiny && cargo build -q --offline && ./target/debug/tiny")
        .await;
    assert_eq!(output.stdout, "Hello, world!\n");
    fixture.stop().await;
}

#[tokio::test]
async fn a_loopback_server_started_in_one_call_is_reached_in_the_next() {
    let fixture = Fixture::new().await;
    fixture.ok("mkdir -p site && echo served > site/index.html").await;
    fixture
        .ok("cd site && (python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &) ; for i in $(seq 1 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8765), 1)' 2>/dev/null && exit 0; sleep 0.05; done; exit 1")
        .await;
    let output = fixture
        .sandbox
        .shell()
        .execute(ShellRequest::new(
            "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:8765/\").read().decode(), end=\"\")'",
        ))
        .await
        .unwrap();
    assert_eq!(output.stdout, "served\n", "{output:?}");
    fixture.stop().await;
}
