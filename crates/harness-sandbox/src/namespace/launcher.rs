//! Starts bubblewrap from one long-lived thread. `--die-with-parent` uses `PR_SET_PDEATHSIG`,
//! which fires when the *thread* that forked the child ends: a bwrap forked from a runtime
//! worker or a blocking-pool thread would be killed when that thread idles out. The launcher
//! thread lives as long as the process, so a sandbox dies exactly when the harness does.

use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};
use tokio::sync::oneshot;

type Job = (Command, oneshot::Sender<std::io::Result<Child>>);

fn launcher() -> std::io::Result<mpsc::Sender<Job>> {
    static LAUNCHER: OnceLock<Mutex<Option<mpsc::Sender<Job>>>> = OnceLock::new();
    let slot = LAUNCHER.get_or_init(|| Mutex::new(None));
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(sender) = slot.as_ref() {
        return Ok(sender.clone());
    }
    let (sender, jobs) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("harness-sandbox-launcher".to_owned())
        .spawn(move || {
            for (mut command, reply) in jobs {
                let _ = reply.send(command.spawn());
            }
        })?;
    *slot = Some(sender.clone());
    Ok(sender)
}

/// Spawns `command` from the launcher thread.
pub(crate) async fn spawn(command: Command) -> std::io::Result<Child> {
    let (reply, result) = oneshot::channel();
    launcher()?
        .send((command, reply))
        .map_err(|_| std::io::Error::other("the sandbox launcher thread is gone"))?;
    result
        .await
        .map_err(|_| std::io::Error::other("the sandbox launcher thread is gone"))?
}
