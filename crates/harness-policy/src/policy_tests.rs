//! The decision-order table: every branch of [`Policy::decide`].

use super::{Decision, Mode, Policy};
use crate::rule::Rule;
use harness_core::ToolAnnotations;
use serde_json::{Value, json};

const READ: ToolAnnotations = ToolAnnotations::new().read_only().closed_world();
const WRITE: ToolAnnotations = ToolAnnotations::new().destructive(true).closed_world();
const SHELL: ToolAnnotations = ToolAnnotations::new().destructive(true).open_world(true);
const MCP_UNHINTED: ToolAnnotations = ToolAnnotations::new();
const PLAN: ToolAnnotations = ToolAnnotations::new().destructive(false).closed_world();
const MCP_READ_OPEN: ToolAnnotations = ToolAnnotations::new().read_only().open_world(true);

fn rules(texts: &[&str]) -> Vec<Rule> {
    texts
        .iter()
        .map(|text| Rule::parse(text).unwrap_or_else(|err| panic!("{text}: {err}")))
        .collect()
}

fn policy(mode: Mode, allow: &[&str], ask: &[&str], deny: &[&str]) -> Policy {
    Policy {
        mode,
        allow: rules(allow),
        ask: rules(ask),
        deny: rules(deny),
        ..Policy::default()
    }
}

/// `A` allow, `?` ask, `D` deny, `!` invalid.
fn short(decision: &Decision) -> char {
    match decision {
        Decision::Allow => 'A',
        Decision::Ask { .. } => '?',
        Decision::Deny { .. } => 'D',
        Decision::Invalid { .. } => '!',
    }
}

fn sh(command: &str) -> Value {
    json!({ "command": command })
}

fn at(path: &str) -> Value {
    json!({ "path": path, "content": "x" })
}

#[test]
fn decision_order_table() {
    use Mode::{Bypass, Default, DontAsk, Explore};
    #[rustfmt::skip]
    let table: &[(&str, Policy, &str, ToolAnnotations, Value, char)] = &[
        // 1. deny rules come first: they beat allow rules and bypass.
        ("deny beats allow", policy(Default, &["execute"], &[], &["execute(rm *)"]), "execute", SHELL, sh("rm -rf x"), 'D'),
        ("deny beats bypass", policy(Bypass, &[], &[], &["write_file(src/**)"]), "write_file", WRITE, at("src/a/b.rs"), 'D'),
        ("deny matches any simple command", policy(Bypass, &[], &[], &["execute(rm *)"]), "execute", SHELL, sh("ls; rm -rf ~"), 'D'),
        ("whole-tool deny", policy(Bypass, &[], &[], &["read_file"]), "read_file", READ, at("a.txt"), 'D'),
        // 2. ask rules next: they beat allow rules, bypass and read-only.
        ("ask beats allow", policy(Default, &["execute"], &["execute(git push*)"], &[]), "execute", SHELL, sh("git push"), '?'),
        ("ask beats read-only", policy(Bypass, &[], &["read_file(secrets/*)"], &[]), "read_file", READ, at("secrets/k"), '?'),
        // 3. tool checks: leaving plan mode asks in every mode, over allow rules and bypass;
        //    dont_ask denies it; a deny rule still wins.
        ("plan_exit asks by default", policy(Default, &[], &[], &[]), "plan_exit", PLAN, json!({}), '?'),
        ("plan_exit asks in bypass", policy(Bypass, &["plan_exit"], &[], &[]), "plan_exit", PLAN, json!({"rationale": "r"}), '?'),
        ("plan_exit asks in explore", policy(Explore, &[], &[], &[]), "plan_exit", PLAN, json!({}), '?'),
        ("plan_exit in dont_ask", policy(DontAsk, &["plan_exit"], &[], &[]), "plan_exit", PLAN, json!({}), 'D'),
        ("plan_exit denied by a rule", policy(Bypass, &[], &[], &["plan_exit"]), "plan_exit", PLAN, json!({}), 'D'),
        ("plan_write runs", policy(Default, &[], &[], &[]), "plan_write", PLAN, json!({"content": "x"}), 'A'),
        //    explore denies what is not read-only, even when a rule allows it.
        ("explore denies a write", policy(Explore, &["write_file"], &[], &[]), "write_file", WRITE, at("a.txt"), 'D'),
        ("explore denies the shell", policy(Explore, &["execute"], &[], &[]), "execute", SHELL, sh("ls"), 'D'),
        ("explore allows a read", policy(Explore, &[], &[], &[]), "read_file", READ, at("a.txt"), 'A'),
        //    dangerous paths ask in every mode, bypass and allow rules included.
        ("dangerous .git in bypass", policy(Bypass, &[], &[], &[]), "write_file", WRITE, at(".git/config"), '?'),
        ("dangerous .env over an allow rule", policy(Default, &["write_file"], &[], &[]), "write_file", WRITE, at("app/.env"), '?'),
        ("dangerous .env.local read", policy(Bypass, &[], &[], &[]), "read_file", READ, at(".env.local"), '?'),
        ("dangerous .ssh", policy(Bypass, &[], &[], &[]), "read_file", READ, at("home/.ssh/known_hosts"), '?'),
        ("dangerous rc file via the shell", policy(Bypass, &["execute"], &[], &[]), "execute", SHELL, sh("echo x >> ~/.bashrc"), '?'),
        ("dangerous via --opt=path", policy(Bypass, &[], &[], &[]), "execute", SHELL, sh("tool --file=.env"), '?'),
        ("dangerous glob argument", policy(Bypass, &[], &[], &[]), "grep_files", READ, json!({"pattern": "KEY", "glob": "**/.env"}), '?'),
        ("dangerous and dont_ask", policy(DontAsk, &[], &[], &[]), "write_file", WRITE, at(".gitconfig"), 'D'),
        //    a command line the splitter cannot see through asks, even in bypass.
        ("unparseable over an allow rule", policy(Default, &["execute(echo *)"], &[], &[]), "execute", SHELL, sh("echo $(rm -rf ~)"), '?'),
        ("opaque in bypass", policy(Bypass, &["execute"], &[], &[]), "execute", SHELL, sh("echo $'\\x69d'"), '?'),
        ("opaque and dont_ask", policy(DontAsk, &["execute"], &[], &[]), "execute", SHELL, sh("[[ -f x ]]"), 'D'),
        ("opaque still denied by a rule", policy(Bypass, &[], &[], &["execute(rm *)"]), "execute", SHELL, sh("echo $'x'; rm -rf ~"), 'D'),
        ("substitutions are seen through", policy(Default, &["execute(echo *)", "execute(id)"], &[], &[]), "execute", SHELL, sh("echo `id`"), 'A'),
        ("a substituted command must be covered", policy(Default, &["execute(echo *)"], &[], &[]), "execute", SHELL, sh("echo `id`"), '?'),
        //    protected paths: a write asks in every mode, bypass and allow rules included;
        //    dont_ask denies it; a deny rule refuses it; reads are the file tools' business.
        ("protected write in bypass", policy(Bypass, &["write_file"], &[], &[]), "write_file", WRITE, at("harness.toml"), '?'),
        ("protected write in a user layer", policy(Bypass, &[], &[], &[]), "write_file", WRITE, at("alice/AGENTS.md"), '?'),
        ("protected state", policy(Mode::AcceptEdits, &[], &[], &[]), "edit_file", WRITE, at("agents/main/agent_state.json"), '?'),
        ("protected and dont_ask", policy(DontAsk, &["write_file"], &[], &[]), "write_file", WRITE, at("tools.json"), 'D'),
        ("protected and a deny rule", policy(Bypass, &[], &[], &["write_file(memory/**)"]), "write_file", WRITE, at("memory/x.md"), 'D'),
        ("protected read passes the policy", policy(Default, &[], &[], &[]), "read_file", READ, at("AGENTS.md"), 'A'),
        ("a file tool writing plans/ asks", policy(Bypass, &[], &[], &[]), "write_file", WRITE, at("plans/PLAN.md"), '?'),
        ("plan_write is exempt by tool", policy(Default, &[], &[], &[]), "plan_write", PLAN, json!({"content": "x", "path": "plans/PLAN.md"}), 'A'),
        ("protected via the shell", policy(Bypass, &["execute"], &[], &[]), "execute", SHELL, sh("echo 'mode = \"bypass\"' >> harness.toml"), '?'),
        ("protected shell argument", policy(Default, &["execute(cp *)"], &[], &[]), "execute", SHELL, sh("cp /tmp/x ./skills/a/SKILL.md"), '?'),
        ("protected by a glob", policy(Bypass, &[], &[], &[]), "execute", SHELL, sh("sed -i s/a/b/ harn*.toml"), '?'),
        ("sensitive by a glob", policy(Bypass, &[], &[], &[]), "execute", SHELL, sh("cat .en*"), '?'),
        ("sensitive by a ? glob", policy(Bypass, &[], &[], &[]), "execute", SHELL, sh("cat ~/.ss?/id_*"), '?'),
        ("a glob that cannot reach it", policy(Bypass, &[], &[], &[]), "execute", SHELL, sh("rm -f *.o"), 'A'),
        // 4. allow rules.
        ("allow rule for the shell", policy(Default, &["execute(git status*)"], &[], &[]), "execute", SHELL, sh("git status --short"), 'A'),
        ("allow must cover every command", policy(Default, &["execute(git status*)"], &[], &[]), "execute", SHELL, sh("git status; rm -rf ~"), '?'),
        ("two allow rules cover a list", policy(Default, &["execute(git status*)", "execute(ls*)"], &[], &[]), "execute", SHELL, sh("git status && ls -la"), 'A'),
        ("allow rule for an MCP tool", policy(Default, &["mcp__x__run(*\"safe\"*)"], &[], &[]), "mcp__x__run", MCP_UNHINTED, json!({"mode": "safe"}), 'A'),
        ("allow rule in dont_ask", policy(DontAsk, &["execute(make*)"], &[], &[]), "execute", SHELL, sh("make test"), 'A'),
        // 5. the mode.
        ("bypass runs the shell", policy(Bypass, &[], &[], &[]), "execute", SHELL, sh("rm -rf build"), 'A'),
        ("default: read-only runs", policy(Default, &[], &[], &[]), "read_file", READ, at("a.txt"), 'A'),
        ("default: closed-world write runs", policy(Default, &[], &[], &[]), "write_file", WRITE, at("notes/a.md"), 'A'),
        ("default: read-only MCP tool, open world", policy(Default, &[], &[], &[]), "mcp__web__fetch", MCP_READ_OPEN, json!({"url": "x"}), 'A'),
        ("default: the shell asks", policy(Default, &[], &[], &[]), "execute", SHELL, sh("touch marker"), '?'),
        ("default: unhinted MCP tool asks", policy(Default, &[], &[], &[]), "mcp__x__run", MCP_UNHINTED, json!({}), '?'),
        ("accept_edits: the shell asks", policy(Mode::AcceptEdits, &[], &[], &[]), "execute", SHELL, sh("ls"), '?'),
        ("dont_ask: the shell is denied", policy(DontAsk, &[], &[], &[]), "execute", SHELL, sh("ls"), 'D'),
        ("dont_ask: an ask rule denies", policy(DontAsk, &[], &["read_file"], &[]), "read_file", READ, at("a"), 'D'),
        ("dont_ask: read-only still runs", policy(DontAsk, &[], &[], &[]), "read_file", READ, at("a"), 'A'),
        // A path the file tool refuses is an error result, never a question; even a deny
        // rule does not turn it into one.
        ("refused path", policy(Default, &[], &[], &[]), "write_file", WRITE, at("../outside"), '!'),
        ("refused path, denied tool", policy(Default, &[], &[], &["write_file"]), "write_file", WRITE, at("/etc/../../x"), '!'),
    ];
    let mut wrong = Vec::new();
    for (name, policy, tool, hints, input, expected) in table {
        let got = policy.decide(tool, *hints, input);
        if short(&got) != *expected {
            wrong.push(format!("{name}: expected {expected}, got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn annotations_not_names_decide_what_is_read_only() {
    let default = Policy::default();
    // The same name with other hints gets another decision.
    assert_eq!(
        default.decide("read_file", MCP_UNHINTED, &json!({"path": "a"})).clone(),
        ask_for("read_file")
    );
    assert_eq!(default.decide("execute_report", READ, &json!({})), Decision::Allow);
}

fn ask_for(tool: &str) -> Decision {
    Decision::Ask {
        reason: "this tool can change things outside your area".to_owned(),
        suggestion: tool.to_owned(),
        suggestions: vec![tool.to_owned()],
    }
}

#[test]
fn asks_suggest_a_rule_that_would_allow_the_call() {
    let default = Policy::default();
    let suggested = |tool: &str, hints, input: Value| match default.decide(tool, hints, &input) {
        Decision::Ask { suggestion, .. } => suggestion,
        other => panic!("{tool}: {other:?}"),
    };
    assert_eq!(
        suggested("execute", SHELL, sh("git push origin main; ls")),
        "execute(git push*)"
    );
    assert_eq!(suggested("mcp__x__run", MCP_UNHINTED, json!({"a": 1})), "mcp__x__run");
    let asking = policy(Mode::Default, &[], &["write_file"], &[]);
    assert!(matches!(
        asking.decide("write_file", WRITE, &at("notes/a.md")),
        Decision::Ask { suggestion, .. } if suggestion == "write_file(notes/a.md)"
    ));
}

#[test]
fn always_is_never_offered_for_protected_sensitive_or_opaque_calls() {
    let default = Policy {
        ask: rules(&["write_file"]),
        ..Policy::default()
    };
    for (tool, hints, input) in [
        ("write_file", WRITE, at(".env")),
        ("write_file", WRITE, at("harness.toml")),
        ("write_file", WRITE, at("bob/MEMORY.md")),
        ("execute", SHELL, sh("cat .en?")),
        ("execute", SHELL, sh("ls > AGENTS.md")),
        ("execute", SHELL, sh("echo $'x'")),
    ] {
        match default.decide(tool, hints, &input) {
            Decision::Ask {
                suggestion,
                suggestions,
                ..
            } => assert!(
                suggestion.is_empty() && suggestions.is_empty(),
                "{input}: {suggestions:?}"
            ),
            other => panic!("{input}: {other:?}"),
        }
    }
}

#[test]
fn a_command_line_gets_one_suggestion_per_uncovered_command() {
    let policy = policy(Mode::Default, &["execute(ls*)"], &[], &[]);
    let Decision::Ask { suggestions, .. } = policy.decide(
        "execute",
        SHELL,
        &sh("git push origin; ls -la; cargo test && git push x"),
    ) else {
        panic!("not an ask");
    };
    assert_eq!(suggestions, ["execute(git push*)", "execute(cargo test*)"]);
    // Adding them allows the line.
    let mut approved = policy.clone();
    approved
        .allow
        .extend(rules(&["execute(git push*)", "execute(cargo test*)"]));
    assert_eq!(
        approved.decide(
            "execute",
            SHELL,
            &sh("git push origin; ls -la; cargo test && git push x")
        ),
        Decision::Allow
    );
}

#[test]
fn a_custom_protected_set_replaces_the_default() {
    let custom = Policy::default()
        .with_protected(crate::Protected::from_globs(&["deploy/**".to_owned()]).unwrap_or_else(|err| panic!("{err}")));
    assert_eq!(short(&custom.decide("write_file", WRITE, &at("deploy/prod.yaml"))), '?');
    assert_eq!(short(&custom.decide("write_file", WRITE, &at("harness.toml"))), 'A');
    let none = Policy::default().with_protected(crate::Protected::none());
    assert_eq!(short(&none.decide("write_file", WRITE, &at("AGENTS.md"))), 'A');
    // A child keeps the parent's protected paths.
    assert_eq!(
        short(&custom.inherited().decide("write_file", WRITE, &at("deploy/x"))),
        '?'
    );
}

#[test]
fn a_child_keeps_the_deny_and_ask_rules_and_the_mode_but_not_the_allow_rules() {
    let parent = policy(Mode::DontAsk, &["execute"], &["read_file(x)"], &["write_file"]);
    let child = parent.inherited();
    assert_eq!(child.mode, Mode::DontAsk);
    assert!(child.allow.is_empty());
    assert_eq!(short(&child.decide("write_file", WRITE, &at("a"))), 'D');
    assert_eq!(short(&child.decide("execute", SHELL, &sh("ls"))), 'D');
}
