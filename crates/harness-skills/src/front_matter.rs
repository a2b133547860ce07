//! YAML front matter (`---` lines around a YAML block at the top of a Markdown file), as the
//! files people already have write it: `SKILL.md` here, agent files in `harness-agents`.
//! One reader for both, so a quirk one accepts the other accepts too.

use yaml_serde::{Mapping, Value};

/// Splits `---\n<yaml>\n---\n<body>` (a leading byte-order mark is skipped) into the YAML
/// and the body; `None` when the text does not start with such a block.
pub fn split(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n"))?;
    if let Some(body) = rest.strip_prefix("---") {
        return Some(("", body));
    }
    let at = rest.match_indices("\n---").map(|(at, _)| at).find(|&at| {
        let after = &rest[at + 4..];
        after.is_empty() || after.starts_with('\n') || after.starts_with("\r\n")
    })?;
    Some((&rest[..at], &rest[at + 4..]))
}

/// Front matter read line by line, for text strict YAML refuses (an unquoted `:` inside a
/// description, a multi-line description whose example dialogue has `user:` lines): a line
/// that starts at column 0 with one of `known_keys` and `:` begins that key, every other
/// line continues the previous key's value. The values of `text_keys` are taken as text
/// (surrounding quotes removed); another key's value is read as YAML when it parses (a
/// list, a number, an indented mapping), else as text. `None` when the first line that is
/// not blank or a comment begins no known key.
pub fn lenient(yaml: &str, known_keys: &[&str], text_keys: &[&str]) -> Option<Mapping> {
    let mut entries: Vec<(&str, String)> = Vec::new();
    for line in yaml.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let starts = known_keys.iter().find(|key| {
            line.strip_prefix(**key)
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
        });
        match (starts, entries.last_mut()) {
            (Some(key), _) => entries.push((key, line[key.len() + 1..].trim().to_owned())),
            (None, Some((_, value))) => {
                value.push('\n');
                value.push_str(line);
            }
            (None, None) if line.trim().is_empty() || line.trim_start().starts_with('#') => {}
            (None, None) => return None,
        }
    }
    if entries.is_empty() {
        return None;
    }
    let mut map = Mapping::new();
    for (key, text) in entries {
        let value = if text_keys.contains(&key) {
            Value::String(unquote(text.trim()).to_owned())
        } else {
            match yaml_serde::from_str::<Value>(&text) {
                Ok(Value::Null) if !text.trim().is_empty() => Value::String(text.trim().to_owned()),
                Ok(value) => value,
                Err(_) => Value::String(text.trim().to_owned()),
            }
        };
        map.insert(Value::String(key.to_owned()), value);
    }
    Some(map)
}

fn unquote(text: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = text.strip_prefix(quote).and_then(|rest| rest.strip_suffix(quote)) {
            return inner;
        }
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_block_is_split_from_the_body() {
        assert_eq!(split("\u{feff}---\na: 1\n---\nbody\n"), Some(("a: 1", "\nbody\n")));
        assert_eq!(split("---\n---\nbody"), Some(("", "\nbody")));
        assert_eq!(split("---\r\na: 1\r\n---\r\n"), Some(("a: 1\r", "\r\n")));
        assert_eq!(split("no front matter"), None);
        assert_eq!(split("---\na: 1\n"), None);
    }

    #[test]
    fn a_known_key_at_column_zero_begins_a_value() {
        let yaml = "name: pdf\ndescription: Use for PDFs: read, fill\n  user: more\nlicense: MIT\nlist: [a, b]";
        assert!(yaml_serde::from_str::<Value>(yaml).is_err(), "strict YAML refuses it");
        let map = lenient(
            yaml,
            &["name", "description", "license", "list"],
            &["name", "description"],
        )
        .unwrap();
        assert_eq!(map["name"], Value::String("pdf".into()));
        assert_eq!(
            map["description"],
            Value::String("Use for PDFs: read, fill\n  user: more".into())
        );
        assert_eq!(map["license"], Value::String("MIT".into()));
        assert_eq!(
            map["list"],
            Value::Sequence(vec![Value::String("a".into()), Value::String("b".into())])
        );
        assert_eq!(lenient("other: x\nname: y", &["name"], &["name"]), None);
        assert_eq!(lenient("# only a comment\n", &["name"], &["name"]), None);
    }
}
