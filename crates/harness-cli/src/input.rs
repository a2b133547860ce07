//! Where `harness run` takes its message from: the argument, `-` or a non-terminal stdin,
//! or `--file PATH`. Stdin and files carry messages far larger than argv allows (1 MB works).

use crate::usage;
use std::io::{IsTerminal as _, Read as _};
use std::path::Path;

/// The message of `harness run`.
pub(crate) fn message(arg: Option<String>, file: Option<&Path>) -> anyhow::Result<String> {
    let bytes = match (arg.as_deref(), file) {
        (Some(_), Some(_)) => return Err(usage("give the message either as an argument or with --file, not both")),
        (None, Some(path)) => {
            std::fs::read(path).map_err(|err| usage(format!("--file {}: {}", path.display(), err)))?
        }
        (Some("-"), None) => read_stdin()?,
        (Some(text), None) => return non_empty(text.to_owned()),
        (None, None) if !std::io::stdin().is_terminal() => read_stdin()?,
        (None, None) => {
            return Err(usage(
                "no message: pass it as an argument, `-` to read stdin, or --file PATH",
            ));
        }
    };
    let text = String::from_utf8(bytes).map_err(|err| {
        usage(format!(
            "the message is not valid UTF-8 (byte {})",
            err.utf8_error().valid_up_to()
        ))
    })?;
    non_empty(text)
}

fn read_stdin() -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|err| anyhow::anyhow!("cannot read stdin: {err}"))?;
    Ok(bytes)
}

fn non_empty(text: String) -> anyhow::Result<String> {
    if text.trim().is_empty() {
        return Err(usage("the message is empty"));
    }
    Ok(text)
}
