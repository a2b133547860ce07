//! `harness doctor`'s report: one line per check, each `ok`, `warn` or `fail` with what to
//! do, and the exit status of the worst ([`Report::exit_code`]). The checks that need no
//! agent live here (services by URL, disk use); the binary adds the ones that load the
//! workspace.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// How one check came out, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Fit.
    Ok,
    /// Works, but something deserves a look.
    Warn,
    /// Does not work.
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked, e.g. `state`.
    pub name: String,
    /// The outcome.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do (for `warn` and `fail`).
    pub fix: Option<String>,
}

impl Check {
    /// A passing check.
    pub fn ok(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    /// A warning with its fix.
    pub fn warn(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// A failure with its fix.
    pub fn fail(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Every check, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The lines.
    pub checks: Vec<Check>,
}

impl Report {
    /// Adds a line.
    pub fn push(&mut self, check: Check) {
        self.checks.push(check);
    }

    /// The worst status (`Ok` for an empty report).
    pub fn worst(&self) -> Status {
        self.checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok)
    }

    /// 0 when everything is ok, 1 with a warning, 2 with a failure.
    pub fn exit_code(&self) -> u8 {
        match self.worst() {
            Status::Ok => 0,
            Status::Warn => 1,
            Status::Fail => 2,
        }
    }

    /// `ok    name: detail` lines, with `      fix: …` under the ones that have a fix, all
    /// through the redaction path.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for check in &self.checks {
            let _ = writeln!(out, "{:<5} {}: {}", check.status.label(), check.name, check.detail);
            if let Some(fix) = &check.fix {
                let _ = writeln!(out, "      fix: {fix}");
            }
        }
        harness_core::redact::redact(&out)
    }
}

/// `host:port` of a `redis://` or `postgres://` URL (default port by scheme).
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let default = match scheme {
        "redis" | "rediss" => 6379,
        "postgres" | "postgresql" => 5432,
        _ => return None,
    };
    if let Some(bracketed) = host_port.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None => default,
        };
        return Some((host.to_owned(), port));
    }
    match host_port.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((host_port.to_owned(), default)),
    }
}

/// Sends `PING` to the Redis at `url` (no authentication) and waits for `+PONG` (or an
/// authentication error, which also proves a Redis answers).
///
/// # Errors
/// What failed, as text.
pub async fn redis_ping(url: &str, timeout: Duration) -> Result<String, String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (host, port) = host_port(url).ok_or_else(|| format!("`{url}` is not a redis:// URL"))?;
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|err| format!("cannot connect to {host}:{port}: {err}"))?;
        stream
            .write_all(b"PING\r\n")
            .await
            .map_err(|err| format!("{host}:{port}: {err}"))?;
        let mut buf = [0u8; 64];
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|err| format!("{host}:{port}: {err}"))?;
        let reply = String::from_utf8_lossy(&buf[..n]).trim().to_owned();
        if reply == "+PONG" || reply.starts_with("-NOAUTH") {
            Ok(format!("Redis at {host}:{port} answers"))
        } else {
            Err(format!("{host}:{port} answered `{reply}`, not like Redis"))
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("{host}:{port} did not answer within {timeout:?}")))
}

/// Opens a TCP connection to the PostgreSQL at `url`.
///
/// # Errors
/// What failed, as text.
pub async fn tcp_reachable(url: &str, timeout: Duration) -> Result<String, String> {
    let (host, port) = host_port(url).ok_or_else(|| format!("`{url}` is not a postgres:// URL"))?;
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host.as_str(), port))).await {
        Ok(Ok(_)) => Ok(format!("{host}:{port} accepts connections")),
        Ok(Err(err)) => Err(format!("cannot connect to {host}:{port}: {err}")),
        Err(_) => Err(format!("{host}:{port} did not answer within {timeout:?}")),
    }
}

/// Bytes and files under `dir` (symbolic links not followed).
pub fn disk_use(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut files = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                bytes += meta.len();
                files += 1;
            }
        }
    }
    (bytes, files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_line_decides_the_exit_code() {
        let mut report = Report::default();
        report.push(Check::ok("a", "fine"));
        assert_eq!(report.exit_code(), 0);
        report.push(Check::warn("b", "meh", "do x"));
        assert_eq!(report.exit_code(), 1);
        report.push(Check::fail("c", "broken", "do y"));
        assert_eq!(report.exit_code(), 2);
        let text = report.render();
        assert!(text.contains("ok    a: fine\n"), "{text}");
        assert!(text.contains("fail  c: broken\n      fix: do y\n"), "{text}");
    }

    #[test]
    fn urls_give_host_and_port() {
        assert_eq!(host_port("redis://127.0.0.1:6379/0"), Some(("127.0.0.1".into(), 6379)));
        assert_eq!(host_port("redis://h"), Some(("h".into(), 6379)));
        assert_eq!(
            host_port("postgres://u:pw@db.example/test"),
            Some(("db.example".into(), 5432))
        );
        assert_eq!(host_port("http://x"), None);
    }
}
