//! Wire names of MCP tools: `mcp__<server>__<tool>`.

/// The harness name of `tool` on `server`: `mcp__<server>__<tool>`, where letters, digits,
/// `_` and `-` are kept and any other character becomes `_`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("mcp__{}__{}", sanitize(server), sanitize(tool))
}

/// The on-demand group of a server's tools: `mcp__<server>`.
pub fn group_name(server: &str) -> String {
    format!("mcp__{}", sanitize(server))
}

/// Keeps ASCII letters, digits, `_` and `-`; replaces anything else with `_`.
pub fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn keeps_safe_characters_and_replaces_the_rest() {
        assert_eq!(tool_name("time", "get_current_time"), "mcp__time__get_current_time");
        assert_eq!(tool_name("my.server", "get-sum"), "mcp__my_server__get-sum");
        assert_eq!(tool_name("s p", "a/b:c\u{e9}"), "mcp__s_p__a_b_c_");
        assert_eq!(group_name("gh.com"), "mcp__gh_com");
    }
}
