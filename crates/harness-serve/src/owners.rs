//! Tenancy: with API keys a session belongs to the user whose turn first ran it. The owner is
//! recorded in the session's state ([`harness_core::SessionOwners`], the `[state]` backend,
//! so replicas agree), and every session route answers anyone else 404, under every
//! isolation scope: an isolation scope decides which files and memory callers share, never
//! whose conversation a caller may read or continue.

use crate::error::ApiError;
use crate::queue::SessionKey;
use crate::{Gateway, Served};
use harness_core::{RuntimeContext, SessionOwners, StateKey};

/// What a route does with the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads it or acts on its turns and tasks: only the owner, when there is one.
    Read,
    /// Starts a turn: the first one records the caller as the owner.
    Claim,
}

/// The state key of `key`'s session as the agent lays it out (the scope decides its user).
pub(crate) fn state_key(served: &Served, key: &SessionKey) -> Result<StateKey, ApiError> {
    let ctx = served
        .agent
        .bind(RuntimeContext::for_user(key.user.clone()).with_session(key.session.clone()))
        .map_err(|err| ApiError::bad_request(harness_core::error_chain(&err)))?;
    ctx.get::<StateKey>()
        .cloned()
        .ok_or_else(|| ApiError::internal("the agent bound no state key to the call"))
}

fn owners(served: &Served) -> SessionOwners {
    SessionOwners::new(std::sync::Arc::clone(served.agent.kernel().state_store()))
}

/// 404 unless the caller owns `key`'s session (or it has no owner yet); with
/// [`Access::Claim`] an unowned session becomes the caller's. Without keys every caller
/// names itself, so nothing is recorded or checked.
///
/// # Errors
/// 404 for another user's session; 500 when the state store fails.
pub(crate) async fn check(
    gateway: &Gateway,
    served: &Served,
    key: &SessionKey,
    access: Access,
) -> Result<(), ApiError> {
    // Binding checks the ids first: a reserved user or session name is a 400 at once.
    let state_key = state_key(served, key)?;
    if !gateway.authenticates() {
        return Ok(());
    }
    let owners = owners(served);
    let store_error = |err: harness_core::StateError| ApiError::internal(harness_core::error_chain(&err));
    let allowed = match access {
        Access::Read => owners.allows(&state_key, &key.user).await.map_err(store_error)?,
        Access::Claim => owners.claim(&state_key, &key.user).await.map_err(store_error)? == key.user,
    };
    if allowed {
        Ok(())
    } else {
        // The same answer as for a session that does not exist: nothing tells it apart.
        Err(not_found(key))
    }
}

/// Whether the caller owns `key`'s session or it has none (for the sessions list).
///
/// # Errors
/// As [`check`].
pub(crate) async fn visible(gateway: &Gateway, served: &Served, key: &SessionKey) -> Result<bool, ApiError> {
    match check(gateway, served, key, Access::Read).await {
        Ok(()) => Ok(true),
        Err(err) if err.status == axum::http::StatusCode::NOT_FOUND => Ok(false),
        Err(err) => Err(err),
    }
}

/// The 404 a non-owner gets.
pub(crate) fn not_found(key: &SessionKey) -> ApiError {
    ApiError::not_found(format!("no session `{}` for this user", key.session))
}
