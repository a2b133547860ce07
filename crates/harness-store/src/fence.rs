//! How a shared state store finds the lease that fences a session's writes.

use harness_core::{LeaseKey, StateKey};
use std::sync::Arc;
use std::time::Duration;

/// The default lease period of the leases in shared backends (`lease_ttl` in `[state]`);
/// a held lease is renewed every third of it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// Maps a session's [`StateKey`] to the [`LeaseKey`] of the lease that guards it, so a store
/// that keeps leases beside the state can check a write's fencing token against the newest
/// token issued for that lease. The default is [`default_lease_key`]; a caller whose lease
/// keys follow another scheme (an isolation scope shared by several users) passes its own.
pub type LeaseKeyOf = Arc<dyn Fn(&StateKey) -> LeaseKey + Send + Sync>;

/// `LeaseKey::new(&[agent, user, session])`: one lease per stored session.
pub fn default_lease_key(key: &StateKey) -> LeaseKey {
    LeaseKey::new(&[key.agent_id.as_str(), key.user_id.as_str(), key.session_id.as_str()])
}

/// The state key as one unambiguous string (the escaped parts joined with `/`).
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) fn state_id(key: &StateKey) -> String {
    default_lease_key(key).as_str().to_owned()
}
