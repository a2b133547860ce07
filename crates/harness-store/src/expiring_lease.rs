//! What the leases with expiry (Redis, PostgreSQL) share: the poll loop of a waiting
//! acquirer, and the renewal task and release of a held lease.

use async_trait::async_trait;
use harness_core::{CancellationToken, FencingToken, LeaseError, LeaseGuard, LeaseRelease};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// The longest pause between two attempts of a waiting acquirer.
const MAX_POLL: Duration = Duration::from_millis(50);

/// A lease a backend holds for one key.
#[async_trait]
pub(crate) trait HeldLease: Clone + Send + Sync + 'static {
    /// Extends the lease while it is ours: `Ok(false)` when another holder has it.
    async fn renew_once(&self) -> Result<bool, harness_core::BoxError>;
    /// Gives the lease up if it is still ours (errors are logged: the lease expires anyway).
    async fn release(&self);
    /// The lease period.
    fn ttl(&self) -> Duration;
    /// The fencing token it was acquired with.
    fn token(&self) -> u64;
    /// The lease's key in the backend, for logs.
    fn name(&self) -> &str;
}

/// Calls `attempt` until it takes the lease, pausing between attempts with a growing delay
/// (at most 50 ms, and never past the holder's expiry when `attempt` knows it). Stops with
/// [`LeaseError::Cancelled`] when `cancel` fires between attempts. An attempt itself is not
/// raced against `cancel`: a reply dropped after the backend handed over the lease would
/// leave it held by nobody until it expires.
pub(crate) async fn poll_acquire<F, Fut>(cancel: &CancellationToken, mut attempt: F) -> Result<u64, LeaseError>
where
    F: FnMut() -> Fut,
    // Ok(token), or Err(how long the holder has left, when known).
    Fut: Future<Output = Result<Result<u64, Option<Duration>>, LeaseError>>,
{
    let mut delay = Duration::from_millis(2);
    loop {
        if cancel.is_cancelled() {
            return Err(LeaseError::Cancelled);
        }
        match attempt().await? {
            Ok(token) => return Ok(token),
            Err(left) => {
                let pause = left.map_or(delay, |left| delay.min(left.max(Duration::from_millis(1))));
                tokio::select! {
                    () = cancel.cancelled() => return Err(LeaseError::Cancelled),
                    () = tokio::time::sleep(pause) => {}
                }
                delay = (delay * 2).min(MAX_POLL);
            }
        }
    }
}

/// The guard of a freshly acquired lease: renews it every `ttl / 3` until released, and
/// fires `lost()` when it is not ours any more or could not be renewed before it expired.
pub(crate) fn guard<H: HeldLease>(held: H) -> LeaseGuard {
    let lost = CancellationToken::new();
    let stop = CancellationToken::new();
    tokio::spawn(renew(held.clone(), lost.clone(), stop.clone()));
    LeaseGuard::new(
        Some(FencingToken::new(held.token())),
        lost,
        Box::new(Release { held, stop }),
    )
}

async fn renew<H: HeldLease>(held: H, lost: CancellationToken, stop: CancellationToken) {
    let period = held.ttl() / 3;
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        match held.renew_once().await {
            Ok(true) => renewed = Instant::now(),
            Ok(false) => {
                tracing::warn!(lease = %held.name(), "session lease was taken by another holder");
                lost.cancel();
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, lease = %held.name(), "could not renew a session lease");
                if renewed.elapsed() >= held.ttl() {
                    lost.cancel();
                    return;
                }
            }
        }
    }
}

struct Release<H> {
    held: H,
    stop: CancellationToken,
}

#[async_trait]
impl<H: HeldLease> LeaseRelease for Release<H> {
    async fn release(self: Box<Self>) {
        self.stop.cancel();
        self.held.release().await;
    }

    fn release_now(self: Box<Self>) {
        self.stop.cancel();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { self.held.release().await });
        }
        // Without a runtime the lease expires after its TTL.
    }
}
