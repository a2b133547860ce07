//! From a parsed command line ([`crate::shell`]) to what the rules see: every simple command
//! the line runs, unwrapped from the wrappers that run another command (`command`, `env`,
//! `exec`, `nice`, `nohup`, `timeout`, `time`, `stdbuf`, `setsid`, `ionice`, `sudo`, `doas`,
//! `xargs`, `find -exec`, `eval`, `sh -c '…'`, `bash -lc '…'`, …), with the words after quote
//! and escape removal.
//!
//! Each simple command has
//! - **views** for deny and ask rules: the command as written and each command it unwraps
//!   to, each also with its command name reduced to the basename (`/bin/rm -rf x` is also
//!   `rm -rf x`); a rule that matches any view matches the command;
//! - an **allow view**: the innermost command as written, with the assignments it runs under
//!   (`FOO=1 make` is `FOO=1 make`; `sudo make` stays `sudo make`, a change of user is not
//!   unwrapped for allowing). `None` when an allow rule cannot cover it;
//! - its **paths**: the words and redirection targets, for the sensitive and protected path
//!   checks (`shell -c` strings are parsed, not checked as paths).
//!
//! A line is **opaque** when the parser says so, or when a command's name is only known at
//! run time (`$cmd`, `$(echo rm)`), is a glob, or a wrapper's options are not understood.
//! Rules are a convenience: what a command does with its arguments (`git -c alias…`,
//! `awk 'BEGIN{system(…)}'`, a script) is not analysed; the sandbox is the boundary.

use crate::shell::{self, Command, Parsed, Word};

/// One simple command as the rules see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SimpleCommand {
    /// What deny and ask rules match (any of them).
    pub views: Vec<String>,
    /// What an allow rule must match; `None` when none can (a shell wrapper whose inner
    /// commands are listed separately).
    pub allow_view: Option<String>,
    /// The words that may name files: arguments, assignment values, redirection targets.
    pub paths: Vec<Word>,
    /// The rule an "always" approval would add for this command.
    pub suggestion: Option<String>,
    /// The innermost command's words (no assignments, no redirections): what it runs.
    pub runs: String,
}

/// A command line as the rules see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Analysis {
    pub commands: Vec<SimpleCommand>,
    /// Why the line is opaque (empty when it is not).
    pub opaque: Vec<String>,
}

impl Analysis {
    pub(crate) fn is_opaque(&self) -> bool {
        !self.opaque.is_empty() || self.commands.is_empty()
    }
}

/// Analyses `line`.
pub(crate) fn analyse(line: &str) -> Analysis {
    analyse_at(line, 0)
}

fn analyse_at(line: &str, depth: usize) -> Analysis {
    let Parsed { commands, opaque } = shell::parse_at(line, depth);
    let mut analysis = Analysis {
        commands: Vec::new(),
        opaque,
    };
    for command in &commands {
        unwrap_command(command, depth, &mut analysis);
    }
    if analysis.commands.is_empty() && analysis.opaque.is_empty() && depth == 0 {
        analysis.opaque.push("it runs no command".to_owned());
    }
    analysis
}

impl Analysis {
    fn opaque(&mut self, reason: String) {
        if !self.opaque.contains(&reason) {
            self.opaque.push(reason);
        }
    }

    fn merge(&mut self, inner: Analysis) {
        self.commands.extend(inner.commands);
        for reason in inner.opaque {
            self.opaque(reason);
        }
    }
}

fn join(words: &[&Word]) -> String {
    words
        .iter()
        .map(|word| word.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last path segment of a command name (`/usr/bin/rm` → `rm`).
fn basename(name: &str) -> &str {
    name.rsplit('/').find(|segment| !segment.is_empty()).unwrap_or(name)
}

/// How a wrapper's options are read.
struct Options {
    /// Options that take the next word as their value (or `-xVALUE`).
    with_value: &'static [&'static str],
    /// Long options that take a value (`--name=value` or `--name value`).
    long_with_value: &'static [&'static str],
    /// Whether options the table does not list are accepted as flags (`false`: opaque).
    lenient: bool,
}

/// The wrappers: name, options, positional words before the command (`timeout 5 cmd`).
fn wrapper(name: &str) -> Option<(Options, usize)> {
    let options = |with_value, long_with_value, lenient| Options {
        with_value,
        long_with_value,
        lenient,
    };
    Some(match name {
        "command" => (options(&[], &[], false), 0),
        "exec" => (options(&["-a"], &[], false), 0),
        "nohup" | "builtin" | "busybox" => (options(&[], &[], false), 0),
        "chroot" => (options(&[], &["--userspec", "--groups"], true), 1),
        "nice" => (options(&["-n"], &["--adjustment"], false), 0),
        "timeout" => (options(&["-s", "-k"], &["--signal", "--kill-after"], false), 1),
        "time" => (options(&["-f", "-o"], &["--format", "--output"], false), 0),
        "stdbuf" => (
            options(&["-i", "-o", "-e"], &["--input", "--output", "--error"], false),
            0,
        ),
        "setsid" => (options(&[], &[], false), 0),
        "ionice" => (options(&["-c", "-n"], &["--class", "--classdata"], false), 0),
        "sudo" | "doas" => (
            options(
                &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "-R"],
                &[
                    "--user",
                    "--group",
                    "--chdir",
                    "--prompt",
                    "--role",
                    "--type",
                    "--host",
                    "--other-user",
                    "--close-from",
                    "--command-timeout",
                    "--chroot",
                ],
                false,
            ),
            0,
        ),
        "xargs" => (
            options(
                &["-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "-e"],
                &[
                    "--arg-file",
                    "--delimiter",
                    "--eof",
                    "--max-lines",
                    "--max-args",
                    "--max-procs",
                    "--max-chars",
                    "--replace",
                    "--process-slot-var",
                ],
                true,
            ),
            0,
        ),
        _ => return None,
    })
}

/// `watch`'s options (it runs its arguments joined, through `sh -c`).
const WATCH: Options = Options {
    with_value: &["-n", "-d", "-q"],
    long_with_value: &["--interval", "--differences", "--equexit"],
    lenient: true,
};

/// The string after one of `flags` (`su -c 'cmd'`, `--command=cmd`): `None` when there is
/// none (the command runs a login shell).
fn option_string(args: &[&Word], flags: &[&str]) -> Option<Result<String, String>> {
    let usable = |word: &Word, line: &str| {
        if word.dynamic {
            Err(format!("a command string `{}` only known when it runs", word.text))
        } else {
            Ok(line.to_owned())
        }
    };
    for (index, word) in args.iter().enumerate() {
        let text = word.text.as_str();
        if flags.contains(&text) {
            return Some(match args.get(index + 1) {
                None => Err(format!("`{text}` without a command string")),
                Some(value) => usable(value, &value.text),
            });
        }
        if let Some((flag, line)) = text.split_once('=')
            && flags.contains(&flag)
        {
            return Some(usable(word, line));
        }
    }
    None
}

/// The shells whose `-c` string is parsed as a command line.
const SHELLS: &[&str] = &[
    "sh", "dash", "bash", "zsh", "ksh", "mksh", "ash", "posh", "yash", "fish",
];

/// Flags that make a wrapped command not run: `command -v rm` only looks it up.
fn only_looks_up(name: &str, flag: &str) -> bool {
    name == "command" && matches!(flag, "-v" | "-V")
}

fn unwrap_command(command: &Command, depth: usize, out: &mut Analysis) {
    let mut paths: Vec<Word> = Vec::new();
    for redirect in &command.redirects {
        if !redirect.op.contains("<<") {
            paths.push(redirect.target.clone());
        }
    }
    let redirects: Vec<String> = command
        .redirects
        .iter()
        .map(|redirect| format!("{}{}", redirect.op, redirect.target.text))
        .collect();
    let with_redirects = |text: String| {
        let mut parts: Vec<&str> = Vec::new();
        if !text.is_empty() {
            parts.push(&text);
        }
        parts.extend(redirects.iter().map(String::as_str));
        parts.join(" ")
    };
    let split = command
        .words
        .iter()
        .position(|word| !word.assignment)
        .unwrap_or(command.words.len());
    let mut assignments: Vec<&Word> = command.words[..split].iter().collect();
    let mut words: Vec<&Word> = command.words[split..].iter().collect();
    for word in &command.words {
        paths.push(word.clone());
    }

    let mut views: Vec<String> = Vec::new();
    let mut allow_outer: Option<String> = None;
    let mut xargs = false;
    let mut shell_wrapper = false;
    let add_plain = |views: &mut Vec<String>, words: &[&Word], xargs: bool| {
        let suffix = if xargs { " …" } else { "" };
        views.push(with_redirects(format!("{}{suffix}", join(words))));
        if let Some(name) = words.first() {
            let base = basename(&name.text);
            if base != name.text {
                let mut reduced = vec![base.to_owned()];
                reduced.extend(words[1..].iter().map(|word| word.text.clone()));
                views.push(with_redirects(format!("{}{suffix}", reduced.join(" "))));
            }
        }
    };
    let add_view = |views: &mut Vec<String>, assignments: &[&Word], words: &[&Word], xargs: bool| {
        let mut all: Vec<&Word> = assignments.to_vec();
        all.extend_from_slice(words);
        let mut text = join(&all);
        if xargs {
            views.push(with_redirects(text.clone()));
            text.push_str(" …");
        }
        let written = with_redirects(text);
        if let Some(name) = words.first() {
            let base = basename(&name.text);
            if base != name.text {
                let mut reduced: Vec<String> = assignments.iter().map(|word| word.text.clone()).collect();
                reduced.push(base.to_owned());
                reduced.extend(words[1..].iter().map(|word| word.text.clone()));
                let mut reduced = reduced.join(" ");
                if xargs {
                    reduced.push_str(" …");
                }
                views.push(with_redirects(reduced));
            }
        }
        // Deny rules also see the command without the assignments it runs under.
        if !assignments.is_empty() && !words.is_empty() {
            add_plain(views, words, xargs);
        }
        // Last: the command as written (the allow view, when it is the innermost).
        views.push(written);
    };

    loop {
        add_view(&mut views, &assignments, &words, xargs);
        let Some(name_word) = words.first().copied() else {
            break;
        };
        if name_word.dynamic {
            out.opaque(format!(
                "the command name `{}` is only known when it runs",
                name_word.text
            ));
            // It may expand to nothing (`$(true) rm -rf x` runs `rm`): deny rules also see
            // the words after it, unwrapped like any command.
            if words.len() > 1 {
                let rest = Command {
                    words: words[1..].iter().map(|word| (*word).clone()).collect(),
                    redirects: Vec::new(),
                };
                let mut inner = Analysis::default();
                unwrap_command(&rest, depth + 1, &mut inner);
                for command in inner.commands {
                    views.extend(command.views);
                }
            }
            break;
        }
        if name_word.glob {
            out.opaque(format!("the command name `{}` is a glob", name_word.text));
            break;
        }
        let name = basename(&name_word.text);
        if SHELLS.contains(&name) {
            match shell_string(&words[1..]) {
                ShellString::NotACommand => break,
                ShellString::Opaque(reason) => {
                    out.opaque(reason);
                    break;
                }
                ShellString::Line(line) => {
                    shell_wrapper = true;
                    out.merge(analyse_at(&line, depth + 1));
                    break;
                }
            }
        }
        if name == "alias" && words[1..].iter().any(|word| word.text.contains('=')) {
            // dash applies an alias to the lines after it: `alias g=rm⏎g -rf x`.
            out.opaque("`alias` changes what the commands after it run".to_owned());
            break;
        }
        if matches!(name, "su" | "runuser") {
            match option_string(&words[1..], &["-c", "--command"]) {
                Some(Ok(line)) => {
                    shell_wrapper = true;
                    out.merge(analyse_at(&line, depth + 1));
                }
                Some(Err(reason)) => out.opaque(reason),
                None => {}
            }
            break;
        }
        if name == "trap" {
            // `trap 'cmd' EXIT` runs `cmd` later; `trap - INT`, `trap 5 INT` reset.
            if let Some(action) = words
                .get(1)
                .filter(|word| !word.text.starts_with('-') && !word.text.chars().all(|c| c.is_ascii_digit()))
            {
                if action.dynamic {
                    out.opaque("`trap` with an action only known when it runs".to_owned());
                } else {
                    out.merge(analyse_at(&action.text, depth + 1));
                }
            }
            break;
        }
        if name == "eval" || name == "watch" {
            let args = &words[1..];
            let args: Vec<&Word> = if name == "watch" {
                match skip_options(name, &WATCH, args) {
                    Ok(Some(rest)) => rest,
                    Ok(None) => break,
                    Err(reason) => {
                        out.opaque(reason);
                        break;
                    }
                }
            } else {
                args.to_vec()
            };
            if args.iter().any(|word| word.dynamic) {
                out.opaque(format!("`{name}` of an expansion"));
                break;
            }
            shell_wrapper = true;
            let line = args.iter().map(|word| word.text.as_str()).collect::<Vec<_>>().join(" ");
            out.merge(analyse_at(&line, depth + 1));
            break;
        }
        if name == "find" {
            find_exec(&words[1..], depth, out);
            break;
        }
        if name == "env" {
            match env_command(&words[1..]) {
                Ok(Some((extra, rest))) => {
                    assignments.extend(extra);
                    words = rest;
                    continue;
                }
                Ok(None) => break,
                Err(reason) => {
                    out.opaque(reason);
                    break;
                }
            }
        }
        let Some((options, positional)) = wrapper(name) else {
            break;
        };
        match skip_options(name, &options, &words[1..]) {
            Ok(Some(rest)) => {
                let rest = &rest[positional.min(rest.len())..];
                if rest.is_empty() {
                    break;
                }
                if matches!(name, "sudo" | "doas") && allow_outer.is_none() {
                    // Allowing `git status*` does not allow running it as another user.
                    let mut all: Vec<&Word> = assignments.clone();
                    all.extend_from_slice(&words);
                    allow_outer = Some(with_redirects(join(&all)));
                }
                if name == "xargs" {
                    xargs = true;
                }
                words = rest.to_vec();
            }
            Ok(None) => break,
            Err(reason) => {
                out.opaque(reason);
                break;
            }
        }
    }
    // The innermost view as written is the last one pushed.
    let innermost = views.last().cloned().unwrap_or_default();
    // A command with no words runs nothing (`> file`, or redirections after a subshell):
    // like the redirections of an allowed command, it needs no rule of its own.
    let allow_view = if shell_wrapper || command.words.is_empty() {
        None
    } else {
        Some(allow_outer.unwrap_or(innermost.clone()))
    };
    let suggestion = allow_view.as_ref().map(|view| suggest(view));
    views.dedup();
    out.commands.push(SimpleCommand {
        views,
        allow_view,
        paths,
        suggestion: suggestion.flatten(),
        runs: join(&words),
    });
}

/// The rule that would allow a command: its first two words (`git push*`), or the whole
/// command when it has one word.
fn suggest(view: &str) -> Option<String> {
    let words: Vec<&str> = view.split(' ').filter(|word| !word.is_empty()).take(2).collect();
    if words.is_empty() {
        return None;
    }
    // A suggestion is a rule pattern: glob characters in a word would widen it.
    if words
        .iter()
        .any(|word| word.contains(['*', '?', '[', ']', '{', '}', '(', ')', '\n']))
    {
        return None;
    }
    Some(format!("{}*", words.join(" ")))
}

/// Skips a wrapper's options; the words after them. `Ok(None)` when the wrapper does not run
/// the command that follows (`command -v`).
fn skip_options<'a>(name: &str, options: &Options, words: &[&'a Word]) -> Result<Option<Vec<&'a Word>>, String> {
    let mut index = 0;
    while let Some(word) = words.get(index) {
        let text = word.text.as_str();
        if word.dynamic && text.starts_with('$') {
            return Err(format!("`{name}` with an option only known when it runs"));
        }
        if text == "--" {
            index += 1;
            break;
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        if only_looks_up(name, text) {
            return Ok(None);
        }
        if name == "nice" && text[1..].chars().all(|c| c.is_ascii_digit()) {
            index += 1;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let key = long.split('=').next().unwrap_or(long);
            let key = format!("--{key}");
            if options.long_with_value.contains(&key.as_str()) {
                index += if long.contains('=') { 1 } else { 2 };
                continue;
            }
            if options.lenient || known_long_flag(name, &key) {
                index += 1;
                continue;
            }
            return Err(format!("`{name}` with the option `{key}` this check does not know"));
        }
        // Short options: `-n 5`, `-n5`, `-pk`.
        let short = &text[..2.min(text.len())];
        if options.with_value.contains(&short) {
            index += if text.len() > 2 { 1 } else { 2 };
            continue;
        }
        if options.lenient || known_short_flags(name, &text[1..]) {
            index += 1;
            continue;
        }
        return Err(format!("`{name}` with the option `{text}` this check does not know"));
    }
    Ok(Some(words.get(index..).unwrap_or_default().to_vec()))
}

fn known_short_flags(name: &str, flags: &str) -> bool {
    let allowed = match name {
        "command" => "p",
        "exec" => "cl",
        "time" => "pvaq",
        "setsid" => "cfw",
        "ionice" => "t",
        "timeout" => "v",
        "sudo" | "doas" => "AbEeHiKklnPSsVv",
        _ => "",
    };
    !flags.is_empty() && flags.chars().all(|flag| allowed.contains(flag))
}

fn known_long_flag(name: &str, flag: &str) -> bool {
    match name {
        "timeout" => matches!(flag, "--preserve-status" | "--foreground" | "--verbose"),
        "time" => matches!(flag, "--portability" | "--verbose" | "--append" | "--quiet"),
        "setsid" => matches!(flag, "--ctty" | "--fork" | "--wait"),
        "sudo" => matches!(
            flag,
            "--preserve-env" | "--set-home" | "--non-interactive" | "--login" | "--shell" | "--background" | "--stdin"
        ),
        _ => false,
    }
}

/// What `env` runs: the assignments it adds and the command's words.
type EnvCommand<'a> = (Vec<&'a Word>, Vec<&'a Word>);

/// `env [options] [NAME=value…] [command…]`: the assignments and the command, `Ok(None)`
/// when it runs none (it prints the environment).
fn env_command<'a>(words: &[&'a Word]) -> Result<Option<EnvCommand<'a>>, String> {
    let mut index = 0;
    let mut assignments = Vec::new();
    while let Some(word) = words.get(index) {
        let text = word.text.as_str();
        if word.dynamic && !word.assignment {
            return Err("`env` with a word only known when it runs".to_owned());
        }
        match text {
            "--" => {
                index += 1;
                continue;
            }
            "-" | "-i" | "-0" | "-v" | "--ignore-environment" | "--null" | "--debug" => {
                index += 1;
                continue;
            }
            "-u" | "-C" | "--unset" | "--chdir" => {
                index += 2;
                continue;
            }
            _ => {}
        }
        if text.starts_with("-S") || text.starts_with("--split-string") {
            return Err("`env -S` (it splits a string into a command)".to_owned());
        }
        if text.starts_with("--unset=")
            || text.starts_with("--chdir=")
            || text.starts_with("-u")
            || text.starts_with("-C")
        {
            index += 1;
            continue;
        }
        if text.starts_with('-') {
            return Err(format!("`env` with the option `{text}` this check does not know"));
        }
        if text.contains('=') && !text.starts_with('=') {
            // `env` takes every `NAME=value` before the command, quoted or not.
            assignments.push(*word);
            index += 1;
            continue;
        }
        break;
    }
    let rest: Vec<&Word> = words.get(index..).unwrap_or_default().to_vec();
    if rest.is_empty() {
        return Ok(None);
    }
    Ok(Some((assignments, rest)))
}

enum ShellString {
    /// No `-c`: the shell runs a script or reads its input.
    NotACommand,
    Opaque(String),
    Line(String),
}

/// The `-c` string of a shell's arguments (`-c 'x'`, `-lc 'x'`, `-e -c 'x'`, `-o pipefail -c`).
fn shell_string(args: &[&Word]) -> ShellString {
    let mut index = 0;
    let mut command = false;
    while let Some(word) = args.get(index) {
        let text = word.text.as_str();
        if word.dynamic && text.starts_with('$') && !command {
            return ShellString::Opaque("a shell with an option only known when it runs".to_owned());
        }
        if text == "--" {
            index += 1;
            break;
        }
        if let Some(flags) = text.strip_prefix('-').or_else(|| text.strip_prefix('+')) {
            if flags.is_empty() {
                index += 1;
                break;
            }
            if flags.starts_with('-') {
                // Long options: `--rcfile file` and `--init-file file` take a value, the
                // others (`--norc`, `--login`, …) do not.
                index += if matches!(text, "--rcfile" | "--init-file") {
                    2
                } else {
                    1
                };
                continue;
            }
            if flags.contains('c') {
                command = true;
            }
            // `-o name` / `+o name` / `-O name`: the option name follows.
            index += if flags.ends_with(['o', 'O']) { 2 } else { 1 };
            continue;
        }
        break;
    }
    if !command {
        // A `-c` after words this loop did not read as options (`bash --unknown x -c 'rm'`):
        // fail closed rather than take it for a script's argument.
        let later_c = args.get(index..).unwrap_or_default().iter().any(|word| {
            word.text.strip_prefix('-').is_some_and(|flags| {
                !flags.is_empty() && flags.chars().all(|c| c.is_ascii_alphabetic()) && flags.contains('c')
            })
        });
        if later_c {
            return ShellString::Opaque("a shell's `-c` after arguments this check does not follow".to_owned());
        }
        let reads_input = args.get(index).is_none()
            || args[..index.min(args.len())]
                .iter()
                .any(|word| word.text.starts_with('-') && !word.text.starts_with("--") && word.text.contains('s'));
        if reads_input {
            return ShellString::Opaque("a shell that reads its commands from its input (`… | sh`)".to_owned());
        }
        return ShellString::NotACommand;
    }
    match args.get(index) {
        None => ShellString::Opaque("a shell's `-c` without a command string".to_owned()),
        Some(word) if word.dynamic => ShellString::Opaque(format!(
            "a shell's `-c` string `{}` is only known when it runs",
            word.text
        )),
        Some(word) => ShellString::Line(word.text.clone()),
    }
}

/// `find … -exec cmd … ;` / `-execdir` / `-ok` / `-okdir`: each command is a command too.
fn find_exec(args: &[&Word], depth: usize, out: &mut Analysis) {
    let mut index = 0;
    while index < args.len() {
        let text = args[index].text.as_str();
        index += 1;
        if !matches!(text, "-exec" | "-execdir" | "-ok" | "-okdir") {
            continue;
        }
        let start = index;
        while index < args.len() && !matches!(args[index].text.as_str(), ";" | "+") {
            index += 1;
        }
        let inner = Command {
            words: args[start..index]
                .iter()
                .map(|word| Word {
                    assignment: false,
                    ..(*word).clone()
                })
                .collect(),
            redirects: Vec::new(),
        };
        if inner.words.is_empty() {
            out.opaque("`find -exec` without a command".to_owned());
        } else {
            unwrap_command(&inner, depth + 1, out);
        }
        index += 1;
    }
}

#[cfg(test)]
#[path = "command_line_tests.rs"]
mod tests;
