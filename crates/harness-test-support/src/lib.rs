//! Test support shared by the tests of every Harness crate: a dev-only crate (`publish =
//! false`), used only as a `[dev-dependencies]` entry, never by library code.
//!
//! - [`services`]: where the test Redis and PostgreSQL are (`HARNESS_TEST_REDIS_URL`,
//!   `HARNESS_TEST_POSTGRES_URL`, with the loopback defaults `scripts/services.sh` starts), and
//!   guards that give a test a unique key or table prefix and remove everything under it on
//!   drop, passed or failed ([`services::RedisPrefix`], [`services::PgPrefix`]).
//! - [`openai`]: a fake OpenAI-compatible chat-completions server on a listener it binds to
//!   `127.0.0.1:0` itself, recording every request.
//! - [`net`]: loopback listeners handed over bound (never a port picked, closed and reused)
//!   and an address nothing listens on.
//! - [`tools`]: the real MCP servers `scripts/mcp-servers.sh` installs, and `git`.
//!
//! Every name a test leaves in a shared service starts with [`services::REDIS_ROOT`] or
//! [`services::PG_ROOT`], so `scripts/test.sh` can count what a run left behind.
//!
//! ```
//! let keys = harness_test_support::services::unique_prefix("doc");
//! assert!(keys.starts_with("doc_"));
//! ```

pub mod net;
pub mod openai;
pub mod services;
pub mod tools;
