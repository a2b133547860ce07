//! Unwrapping: the views deny rules see and the allow view allow rules must match.

use super::analyse;

/// Every view of every command.
fn views(line: &str) -> Vec<String> {
    analyse(line)
        .commands
        .into_iter()
        .flat_map(|command| command.views)
        .collect()
}

fn allow_views(line: &str) -> Vec<Option<String>> {
    analyse(line)
        .commands
        .into_iter()
        .map(|command| command.allow_view)
        .collect()
}

fn has(line: &str, view: &str) -> bool {
    views(line).iter().any(|found| found == view)
}

#[test]
fn absolute_paths_are_also_seen_by_their_basename() {
    assert!(has("/bin/rm -rf x", "rm -rf x"));
    assert!(has("/bin/rm -rf x", "/bin/rm -rf x"));
    assert!(has("./rm x", "rm x"));
    // Allowing matches the name as written: `./git` is a file in the workspace.
    assert_eq!(allow_views("./git status"), [Some("./git status".to_owned())]);
}

#[test]
fn wrappers_are_unwrapped() {
    for (line, inner) in [
        ("command rm -rf x", "rm -rf x"),
        ("command -p rm x", "rm x"),
        ("exec rm x", "rm x"),
        ("exec -a name rm x", "rm x"),
        ("nice rm x", "rm x"),
        ("nice -n 5 rm x", "rm x"),
        ("nice -n5 rm x", "rm x"),
        ("nice -10 rm x", "rm x"),
        ("nice --adjustment=3 rm x", "rm x"),
        ("nohup rm x", "rm x"),
        ("timeout 5 rm x", "rm x"),
        ("timeout -s KILL -k 1 5s rm x", "rm x"),
        ("timeout --signal=TERM --preserve-status 5 rm x", "rm x"),
        ("time -p rm x", "rm x"),
        ("stdbuf -oL rm x", "rm x"),
        ("setsid -f rm x", "rm x"),
        ("ionice -c 3 rm x", "rm x"),
        ("sudo rm x", "rm x"),
        ("sudo -u root -E rm x", "rm x"),
        ("doas rm x", "rm x"),
        ("env rm x", "rm x"),
        ("env -i PATH=/bin rm x", "PATH=/bin rm x"),
        ("env -u HOME -- rm x", "rm x"),
        ("env --chdir=/tmp rm x", "rm x"),
        ("nohup nice timeout 1 /usr/bin/env rm x", "rm x"),
        ("FOO=1 command rm x", "FOO=1 rm x"),
    ] {
        assert!(
            has(line, inner),
            "{line:?} does not unwrap to {inner:?}: {:?}",
            views(line)
        );
    }
    assert_eq!(allow_views("nice -n 5 git status"), [Some("git status".to_owned())]);
    assert_eq!(allow_views("FOO=1 make"), [Some("FOO=1 make".to_owned())]);
}

#[test]
fn a_change_of_user_is_not_unwrapped_for_allowing() {
    assert_eq!(allow_views("sudo git status"), [Some("sudo git status".to_owned())]);
    assert!(has("sudo git status", "git status"));
}

#[test]
fn xargs_runs_its_command_with_more_arguments() {
    assert!(has("find . | xargs rm", "rm"));
    assert!(has("find . | xargs -0 -n 1 rm -f", "rm -f …"));
    assert_eq!(allow_views("xargs grep -l x")[0], Some("grep -l x …".to_owned()));
}

#[test]
fn shell_strings_and_eval_are_parsed() {
    for line in [
        "sh -c 'rm -rf x'",
        "bash -lc 'ls; rm -rf x'",
        "bash -e -c \"rm -rf x\"",
        "dash -o errexit -c 'rm -rf x'",
        "/bin/sh -c 'sh -c \"rm -rf x\"'",
        "eval 'rm -rf x'",
        "eval rm -rf x",
        "xargs -I{} sh -c 'rm -rf x'",
        "find . -name '*.o' -exec rm -rf x \\;",
        "find . -execdir rm -rf x \\; -print",
        "su -c 'rm -rf x'",
        "bash --rcfile /dev/null -c 'rm -rf x'",
        "su root --command='rm -rf x'",
        "trap 'rm -rf x' EXIT",
        "watch -n 1 rm -rf x",
        "busybox rm -rf x",
        "chroot /srv rm -rf x",
    ] {
        assert!(has(line, "rm -rf x"), "{line:?}: {:?}", views(line));
        assert!(analyse(line).opaque.is_empty(), "{line:?}: {:?}", analyse(line).opaque);
    }
    // The shell itself needs no allow rule; its commands do.
    let analysed = analyse("sh -c 'git status'");
    assert_eq!(
        analysed
            .commands
            .iter()
            .map(|c| c.allow_view.clone())
            .collect::<Vec<_>>(),
        [Some("git status".to_owned()), None]
    );
    // A script or stdin is not a `-c` string.
    assert_eq!(allow_views("sh ./build.sh"), [Some("sh ./build.sh".to_owned())]);
}

#[test]
fn what_cannot_be_known_is_opaque() {
    for line in [
        "$cmd -rf x",
        "$(echo rm) -rf x",
        "`echo rm` x",
        "r* x",
        "sh -c \"$X\"",
        "eval \"$X\"",
        "env -S 'rm x'",
        "env --bogus rm x",
        "sudo --bogus rm x",
        "timeout $T rm x",
        "alias g=rm\ng -rf x",
        "bash --weird /x -c 'rm -rf x'",
        "sh ./script -xc 'rm -rf x'",
        "echo 'rm -rf x' | sh",
        "echo 'rm -rf x' | bash -s",
        "bash -e",
        "trap \"$X\" EXIT",
        "bash -c",
        "",
        "   ",
        "# nothing",
    ] {
        assert!(analyse(line).is_opaque(), "{line:?} is not opaque");
    }
    assert!(!analyse("command -v rm").is_opaque());
    assert!(!has("command -v rm", "rm"), "`command -v` runs nothing");
}

#[test]
fn paths_are_the_words_and_redirection_targets() {
    let analysed = analyse("FOO=~/.ssh/k cat a 2>err <<EOF\nx\nEOF");
    let paths: Vec<String> = analysed.commands[0]
        .paths
        .iter()
        .map(|word| word.text.clone())
        .collect();
    assert_eq!(paths, ["err", "FOO=~/.ssh/k", "cat", "a"]);
}

#[test]
fn suggestions_name_two_words_and_never_a_glob() {
    let first = |line: &str| analyse(line).commands[0].suggestion.clone();
    assert_eq!(first("git push origin main"), Some("git push*".to_owned()));
    assert_eq!(first("ls"), Some("ls*".to_owned()));
    assert_eq!(first("rm *.o"), Some("rm *.o*".to_owned()).filter(|_| false));
}

/// The analysis against the real `sh` (dash on Debian): stub commands on an otherwise empty
/// `PATH` log how they were run; every run the shell makes must be one the analysis lists
/// (it may list more: a branch not taken). Only lines the analysis does not call opaque.
#[test]
fn every_command_the_real_shell_runs_is_one_the_analysis_lists() {
    use std::process::Command;
    let dir = std::env::temp_dir().join(format!("harness-policy-sh-{}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|err| panic!("{err}"));
    let log = dir.join("log");
    for name in ["alpha", "beta", "gamma"] {
        let path = bin.join(name);
        std::fs::write(&path, "#!/bin/sh\necho \"${0##*/} $*\" >> \"$LOG\"\n").unwrap_or_else(|err| panic!("{err}"));
        let chmod = Command::new("/bin/chmod").arg("+x").arg(&path).status();
        assert!(chmod.is_ok_and(|status| status.success()));
    }
    let lines = [
        "alpha one; beta two && gamma three || alpha four",
        "alpha # it's a comment\nbeta 'x y'",
        "alpha # \"\nbeta",
        "alph\\\na joined",
        "'al'ph\"a\" q\\uoted",
        "alpha $(beta inner) \"$(gamma 'in quotes')\"",
        "alpha `beta \\`gamma deep\\``",
        "alpha <<EOF\n$(beta in-heredoc)\nEOF",
        "alpha <<'EOF'\n$(beta not-run)\nEOF\ngamma after",
        "alpha <<E; alpha $(true\nbeta hidden-from-naive\nE\n)\nbody\nE",
        "alpha <<-E\n\tbody\n\tE\nbeta tabs",
        "(alpha sub; beta sub) > /dev/null 2>&1",
        "{ alpha group; }",
        "if alpha cond; then beta then; else gamma else; fi",
        "for f in a b; do alpha $f; done",
        "X=1 alpha assigned",
        "/usr/bin/env -i PATH=\"$PATH\" LOG=\"$LOG\" alpha env",
        "command alpha cmd",
        "exec alpha exec",
        "/usr/bin/nice -n 1 alpha nice",
        "/usr/bin/timeout 5 alpha timeout",
        "/bin/sh -c 'alpha in-sh; beta \"in sh\"'",
        "/bin/sh -ec \"/bin/sh -c 'gamma twice'\"",
        "eval 'alpha evaled'",
        "eval alpha \"evaled two\"",
        "echo x | /usr/bin/xargs alpha xargs",
        "trap 'alpha trapped' EXIT",
        "alpha bg & wait",
        "! alpha negated",
        "alpha a\\;b c",
        "alpha \"a;b\" 'c&&d'",
        "alpha \\# not-a-comment",
        "alpha x#y",
    ];
    let mut missing = Vec::new();
    for line in lines {
        let analysis = analyse(line);
        assert!(analysis.opaque.is_empty(), "{line:?} is opaque: {:?}", analysis.opaque);
        let _ = std::fs::remove_file(&log);
        // The exit status does not matter (`alpha` after `||` may not run); the log does.
        Command::new("/bin/sh")
            .arg("-c")
            .arg(line)
            .current_dir(&dir)
            .env_clear()
            .env("PATH", &bin)
            .env("LOG", &log)
            .status()
            .unwrap_or_else(|err| panic!("{err}"));
        let ran = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!ran.is_empty(), "{line:?} ran no stub");
        for run in ran.lines() {
            let listed = analysis.commands.iter().any(|command| {
                // An expansion's value is only known when it runs: then the name must
                // agree.
                let dynamic = command.paths.iter().any(|word| word.dynamic);
                let name = |text: &str| text.split(' ').next().unwrap_or_default().to_owned();
                command.runs == run
                    || run.starts_with(&format!("{} ", command.runs))
                    || (dynamic && name(&command.runs) == name(run))
            });
            if !listed {
                missing.push(format!(
                    "{line:?}: the shell ran {run:?}; listed {:?}",
                    analysis
                        .commands
                        .iter()
                        .map(|command| &command.runs)
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
