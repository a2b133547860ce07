//! The parser: what dash reads as commands, words and opaque constructs.

use super::parse;

/// The words of every command found, quote-removed, one string per command.
fn commands(line: &str) -> Vec<String> {
    parse(line)
        .commands
        .iter()
        .map(|command| {
            let mut parts: Vec<String> = command.words.iter().map(|word| word.text.clone()).collect();
            parts.extend(
                command
                    .redirects
                    .iter()
                    .map(|redirect| format!("{}{}", redirect.op, redirect.target.text)),
            );
            parts.join(" ")
        })
        .collect()
}

fn opaque(line: &str) -> bool {
    !parse(line).opaque.is_empty()
}

#[test]
fn lists_pipelines_and_newlines_separate_commands() {
    assert_eq!(commands("git status; rm -rf ~"), ["git status", "rm -rf ~"]);
    assert_eq!(commands("a && b || c | d & e\nf"), ["a", "b", "c", "d", "e", "f"]);
    assert!(!opaque("a && b || c | d & e\nf"));
}

#[test]
fn quotes_and_escapes_are_removed_and_do_not_split() {
    assert_eq!(commands(r#"echo 'a; b' "c && d" e\;f"#), ["echo a; b c && d e;f"]);
    assert_eq!(commands(r#"r\m -rf x"#), ["rm -rf x"]);
    assert_eq!(commands(r#"'r'm x; "r"m y; r""m z"#), ["rm x", "rm y", "rm z"]);
    assert_eq!(commands(r#"echo "a\"b\$c\x""#), [r#"echo a"b$c\x"#]);
    let quoted = &parse("'rm' x").commands[0].words[0];
    assert!(quoted.quoted && !quoted.dynamic);
}

#[test]
fn comments_end_at_the_newline_and_hide_nothing() {
    assert_eq!(commands("git status # it's fine\nrm -rf ~"), ["git status", "rm -rf ~"]);
    assert_eq!(commands("echo a#b # c"), ["echo a#b"]);
    assert_eq!(commands("# only a comment"), Vec::<String>::new());
}

#[test]
fn line_continuations_join_words() {
    assert_eq!(commands("r\\\nm -rf \\\n x"), ["rm -rf x"]);
    assert_eq!(commands("echo 'a\\\nb'"), ["echo a\\\nb"]);
}

#[test]
fn substitutions_and_subshells_are_commands_too() {
    let found = commands("echo $(rm -rf ~) \"`id`\" \"$(ls | wc -l)\"");
    for expected in ["rm -rf ~", "id", "ls", "wc -l"] {
        assert!(found.iter().any(|c| c == expected), "{expected} in {found:?}");
    }
    assert_eq!(commands("(cd x && rm y) > log"), ["cd x", "rm y", ">log"]);
    assert_eq!(commands("{ rm a; }"), ["rm a"]);
    assert_eq!(
        commands("if test -f a; then rm a; else touch a; fi"),
        ["test -f a", "rm a", "touch a"]
    );
    assert_eq!(commands("while true; do rm a; done"), ["true", "rm a"]);
    assert_eq!(commands("for f in a $(ls); do rm $f; done"), ["ls", "rm $f"]);
    assert_eq!(commands("for f do rm $f; done"), ["rm $f"]);
    assert_eq!(
        commands("echo `echo \\`rm x\\``"),
        ["rm x", "echo `rm x`", "echo `echo `rm x``"]
    );
    assert!(
        parse("echo $x ${y:-$(rm z)}")
            .commands
            .iter()
            .any(|c| c.words[0].text == "rm")
    );
    assert!(parse("echo $x").commands[0].words[1].dynamic);
}

#[test]
fn redirections_and_here_documents() {
    assert_eq!(commands("make 2>&1 >>log <in"), ["make 2>&1 >>log <in"]);
    assert_eq!(commands("echo x>~/.bashrc"), ["echo x >~/.bashrc"]);
    // A quoted delimiter: the body is data.
    assert_eq!(commands("cat <<'EOF'\n$(rm -rf ~)\nEOF\nls"), ["cat <<EOF", "ls"]);
    // An unquoted one: its substitutions run.
    let found = commands("cat <<EOF\n$(rm -rf ~)\nEOF\nls");
    assert!(found.contains(&"rm -rf ~".to_owned()), "{found:?}");
    assert!(found.contains(&"ls".to_owned()));
    // `<<-` strips tabs before the delimiter; the line after it is a command.
    assert_eq!(commands("cat <<-E\n\tbody\n\tE\nrm x"), ["cat <<-E", "rm x"]);
    assert!(opaque("cat <<EOF\nnever closed"));
    // A pending here-document is not read at a newline inside `$(…)` (dash runs those lines)
    // but is at one inside a subshell (checked against dash).
    let found = commands("cat <<E; echo $(true\nrm -rf x\nE\n)\nbody\nE");
    assert!(found.contains(&"rm -rf x".to_owned()), "{found:?}");
    let found = commands("cat <<E; echo \"$(true\nrm -rf x\nE\n)\"\nbody\nE");
    assert!(found.contains(&"rm -rf x".to_owned()), "{found:?}");
    assert_eq!(commands("cat <<E; (true\nrm -rf x\nE\n)"), ["cat <<E", "true"]);
    assert!(opaque("cat <<EOF"));
}

#[test]
fn assignments_are_marked() {
    let parsed = parse("FOO=1 BAR=\"$(id)\" make X=2");
    let words = &parsed
        .commands
        .iter()
        .find(|c| c.words.len() == 4)
        .unwrap_or_else(|| panic!("no make in {parsed:?}"))
        .words;
    assert!(words[0].assignment && words[1].assignment);
    assert!(!words[2].assignment);
    assert!(!parse("'FOO'=1 x").commands[0].words[0].assignment);
    assert!(!parse("1A=1 x").commands[0].words[0].assignment);
}

#[test]
fn globs_are_marked_when_unquoted() {
    assert!(parse("cat .en*").commands[0].words[1].glob);
    assert!(!parse("cat '.en*'").commands[0].words[1].glob);
}

#[test]
fn constructs_dialects_disagree_on_are_opaque() {
    for line in [
        "echo $'\\x72m'",
        "echo $\"x\"",
        "[[ -f x ]] && ls",
        "echo {a,b}",
        "touch x{1..3}",
        "function f { rm x; }",
        "f() { rm x; }",
        "case x in x) rm y;; esac",
        "echo $((1+2))",
        "((x++))",
        "diff <(ls) >(cat)",
        "ls &>log",
        "ls |& cat",
        "cat <<<word",
        "echo @(a|b)",
        "echo 'unterminated",
        "echo \"unterminated",
        "echo `unterminated",
        "echo $(unterminated",
        "echo ${unterminated",
        "echo ${x:-'q'}",
        "(ls",
        "ls)",
        "(ls) x",
        "echo >",
        "select x in a; do rm x; done",
    ] {
        assert!(opaque(line), "{line:?} is not opaque");
    }
    for line in [
        "echo '{a,b}'",
        "echo {}",
        "find . -exec rm {} +",
        "echo a{b",
        "echo '$((1))'",
    ] {
        assert!(!opaque(line), "{line:?} is opaque");
    }
}

#[test]
fn opaque_lines_still_list_the_commands_around_them() {
    let parsed = parse("echo $'x'; rm -rf ~");
    assert!(!parsed.opaque.is_empty());
    assert!(parsed.commands.iter().any(|c| c.words[0].text == "rm"));
}

#[test]
fn nesting_is_bounded() {
    let deep = format!("{}x{}", "$(".repeat(200), ")".repeat(200));
    assert!(opaque(&deep));
    let ticks = "echo `a`".to_owned();
    assert!(!opaque(&ticks));
}
