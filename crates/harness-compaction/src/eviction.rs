//! Large tool-result eviction.
//!
//! [`ToolResultEviction`] is an `acting` middleware. A tool result whose text is longer than
//! `max_chars` (default 80,000 characters) is written to
//! `large_tool_results/<agentId>/<call id>-<content hash>.txt` in the caller's namespace and
//! replaced, in the context, by a placeholder giving the path, the size and a head and tail
//! preview, and telling the model to page the file with `read_file` (`offset`/`limit`).
//!
//! The file name is derived from the call id and the content, and written with
//! [`WriteMode::Overwrite`], so running the same call again never fails. When the file cannot
//! be written (or the call has no workspace), the result is cut in place to `max_chars` with
//! a visible marker and a warning is emitted. Tools that page their own output are excluded
//! (configurable). Each eviction emits an [`EventKind::Notice`] of kind
//! [`NOTICE_TOOL_RESULT_EVICTED`] whose data is an [`EvictionNotice`].
//!
//! The `harness` crate makes it a capability (`[tool_result_eviction]`, on by default, and
//! its builder setting); this module is the engine.

use harness_core::{
    ActingNext, Block, EventKind, Hooks, Middleware, ToolCall, ToolContext, ToolOutput, async_trait, error_chain,
    excerpt,
};
use harness_fs::{CallScope, CallWorkspace, WriteMode, WsPath};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

/// Notice kind of an eviction (or an in-place cut); data is an [`EvictionNotice`].
pub const NOTICE_TOOL_RESULT_EVICTED: &str = "tool_result_evicted";
/// Warning code of an eviction whose file could not be written.
pub const WARNING_EVICTION_FAILED: &str = "eviction.write_failed";
/// Tools never evicted by default: they page their own output, or their output is small.
/// `execute` is deliberately not among them.
pub const DEFAULT_EXCLUDED_TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "grep_files",
    "glob_files",
    "list_files",
    "memory_search",
    "memory_get",
    "session_search",
];

/// Settings of tool-result eviction (`[tool_result_eviction]` in `harness.toml`).
///
/// ```
/// use harness_compaction::eviction::ToolResultEvictionConfig;
/// let config = ToolResultEvictionConfig::default().max_chars(20_000).include("read_file");
/// assert!(!config.excluded_tools.contains("read_file"));
/// let parsed: ToolResultEvictionConfig = toml::from_str("max_chars = 20000\nexcluded_tools = []").unwrap();
/// assert_eq!((parsed.max_chars, parsed.preview_chars, parsed.excluded_tools.len()), (20_000, 2_000, 0));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ToolResultEvictionConfig {
    /// Evict a result whose text is longer than this many characters. Default 80,000.
    pub max_chars: usize,
    /// Characters of preview from each end of an evicted result. Default 2,000.
    pub preview_chars: usize,
    /// Directory (in the caller's namespace) for evicted results. Default
    /// `large_tool_results`.
    pub dir: String,
    /// Tools whose results are never evicted. Default [`DEFAULT_EXCLUDED_TOOLS`].
    pub excluded_tools: BTreeSet<String>,
}

impl Default for ToolResultEvictionConfig {
    fn default() -> Self {
        Self {
            max_chars: 80_000,
            preview_chars: 2_000,
            dir: harness_fs::DEFAULT_EVICTED_DIR.to_owned(),
            excluded_tools: DEFAULT_EXCLUDED_TOOLS.iter().map(|name| (*name).to_owned()).collect(),
        }
    }
}

impl ToolResultEvictionConfig {
    /// Sets [`max_chars`](Self::max_chars).
    pub fn max_chars(mut self, chars: usize) -> Self {
        self.max_chars = chars;
        self
    }

    /// Sets [`preview_chars`](Self::preview_chars).
    pub fn preview_chars(mut self, chars: usize) -> Self {
        self.preview_chars = chars;
        self
    }

    /// Sets [`dir`](Self::dir).
    pub fn dir(mut self, dir: impl Into<String>) -> Self {
        self.dir = dir.into();
        self
    }

    /// Never evicts `tool`'s results.
    pub fn exclude(mut self, tool: impl Into<String>) -> Self {
        self.excluded_tools.insert(tool.into());
        self
    }

    /// Evicts `tool`'s results after all (removes it from the exclusions).
    pub fn include(mut self, tool: &str) -> Self {
        self.excluded_tools.remove(tool);
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`EvictionConfigError`] naming the setting that cannot work.
    pub fn validate(&self) -> Result<(), EvictionConfigError> {
        if self.max_chars < 1_000 {
            return Err(EvictionConfigError::MaxTooSmall(self.max_chars));
        }
        if self.preview_chars * 2 >= self.max_chars {
            return Err(EvictionConfigError::PreviewTooLarge {
                preview: self.preview_chars,
                max: self.max_chars,
            });
        }
        match WsPath::parse(&self.dir) {
            Ok(dir) if !dir.is_root() => Ok(()),
            _ => Err(EvictionConfigError::InvalidDir(self.dir.clone())),
        }
    }
}

/// Why a [`ToolResultEvictionConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvictionConfigError {
    /// `max_chars` is too small to leave room for a placeholder.
    #[error("tool_result_eviction max_chars ({0}) must be at least 1000")]
    MaxTooSmall(usize),
    /// The two previews together would not be shorter than `max_chars`.
    #[error("tool_result_eviction preview_chars ({preview}) must be under half of max_chars ({max})")]
    PreviewTooLarge {
        /// The preview size.
        preview: usize,
        /// The threshold.
        max: usize,
    },
    /// `dir` is not a relative workspace path below the root.
    #[error("tool_result_eviction dir {0:?} must be a relative path inside the workspace")]
    InvalidDir(String),
}

/// How an oversized result was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EvictionOutcome {
    /// Written to a file and replaced by a placeholder.
    Evicted,
    /// The file could not be written; the result was cut in place.
    Truncated,
}

/// The data of a [`NOTICE_TOOL_RESULT_EVICTED`] notice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EvictionNotice {
    /// How it was handled.
    pub outcome: EvictionOutcome,
    /// The tool.
    pub tool: String,
    /// The tool call's id.
    pub call_id: String,
    /// Where the full result is (namespace-relative), when it was written.
    pub path: Option<String>,
    /// Characters of the full result text.
    pub chars: u64,
    /// Bytes of the full result text.
    pub bytes: u64,
    /// Lines of the full result text.
    pub lines: u64,
    /// Characters left in the context.
    pub chars_after: u64,
    /// Estimated tokens of the full text.
    pub tokens_before: u64,
    /// Estimated tokens left in the context.
    pub tokens_after: u64,
    /// Why the write failed, when it did.
    pub error: Option<String>,
}

/// The eviction middleware. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct ToolResultEviction {
    config: ToolResultEvictionConfig,
    /// The configured base directory; each call writes under
    /// [`CallScope::evicted_dir`] of it (`<dir>/<agentId>` in the caller's layer).
    dir: WsPath,
}

impl ToolResultEviction {
    /// Eviction with `config`. Where a call's results go is derived from the call's
    /// [`CallScope`].
    ///
    /// # Errors
    /// [`EvictionConfigError`] when the config cannot work.
    pub fn new(config: ToolResultEvictionConfig) -> Result<Self, EvictionConfigError> {
        config.validate()?;
        let dir = WsPath::parse(&config.dir).map_err(|_| EvictionConfigError::InvalidDir(config.dir.clone()))?;
        Ok(Self { config, dir })
    }

    /// The settings.
    pub fn config(&self) -> &ToolResultEvictionConfig {
        &self.config
    }

    async fn evict(
        &self,
        output: ToolOutput,
        text: String,
        tool: String,
        call_id: String,
        ctx: &ToolContext,
    ) -> ToolOutput {
        let chars = text.chars().count();
        let digest = hex::encode(Sha256::digest(text.as_bytes()));
        let name = format!("{}-{}.txt", file_stem(&call_id), digest.get(..16).unwrap_or(&digest));
        let runtime = &ctx.runtime;
        let written = match (runtime.get::<CallScope>(), runtime.get::<CallWorkspace>()) {
            (Some(scope), Some(workspace)) => match scope.evicted_dir(&self.dir).join(&name) {
                Ok(path) => workspace
                    .user
                    .write(&path, text.as_bytes(), WriteMode::Overwrite)
                    .await
                    .map(|()| path)
                    .map_err(|err| error_chain(&err)),
                Err(err) => Err(error_chain(&err)),
            },
            _ => Err("the call has no workspace to write to".to_owned()),
        };
        let (replacement, path, error) = match written {
            Ok(path) => (
                placeholder(&path, &text, chars, self.config.preview_chars),
                Some(path),
                None,
            ),
            Err(error) => {
                tracing::warn!(tool = %tool, call_id = %call_id, error = %error, "could not evict a large tool result; cutting it in place");
                ctx.events
                    .emit(EventKind::Warning {
                        code: WARNING_EVICTION_FAILED.to_owned(),
                        message: format!(
                            "the {chars}-character result of {tool} could not be saved ({error}); it was cut to {} characters",
                            self.config.max_chars
                        ),
                    })
                    .await;
                (
                    cut_in_place(&text, chars, self.config.max_chars, &error),
                    None,
                    Some(error),
                )
            }
        };
        let notice = EvictionNotice {
            outcome: if path.is_some() {
                EvictionOutcome::Evicted
            } else {
                EvictionOutcome::Truncated
            },
            tool,
            call_id,
            path: path.as_ref().map(ToString::to_string),
            chars: chars as u64,
            bytes: text.len() as u64,
            lines: text.lines().count() as u64,
            chars_after: replacement.chars().count() as u64,
            tokens_before: token_estimate(&text),
            tokens_after: token_estimate(&replacement),
            error,
        };
        tracing::info!(tool = %notice.tool, chars = notice.chars, outcome = ?notice.outcome, "evicted a large tool result");
        if ctx.events.is_active() {
            ctx.events
                .emit(EventKind::Notice {
                    kind: NOTICE_TOOL_RESULT_EVICTED.to_owned(),
                    data: serde_json::to_value(&notice).unwrap_or(serde_json::Value::Null),
                })
                .await;
        }
        replace_text(output, replacement)
    }
}

#[async_trait]
impl Middleware for ToolResultEviction {
    fn name(&self) -> &'static str {
        "tool_result_eviction"
    }

    fn hooks(&self) -> Hooks {
        Hooks::ACTING
    }

    async fn acting(&self, call: ToolCall, ctx: &ToolContext, next: ActingNext<'_>) -> ToolOutput {
        if self.config.excluded_tools.contains(&call.name) {
            return next.run(call, ctx).await;
        }
        let (tool, call_id) = (call.name.clone(), call.id.clone());
        let output = next.run(call, ctx).await;
        // Bytes bound characters from above: most results are decided without counting.
        if output.text_len() <= self.config.max_chars {
            return output;
        }
        let text = output.text_content();
        if text.chars().count() <= self.config.max_chars {
            return output;
        }
        self.evict(output, text, tool, call_id, ctx).await
    }
}

/// A file-name-safe form of a call id.
fn file_stem(call_id: &str) -> String {
    let stem: String = call_id
        .chars()
        .take(64)
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' {
                ch
            } else {
                '_'
            }
        })
        .collect();
    if stem.is_empty() { "call".to_owned() } else { stem }
}

/// `1234567` → `1,234,567`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (at, ch) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn head_tail(text: &str, chars: usize, keep: usize) -> (String, String) {
    let head = text.chars().take(keep).collect();
    let tail = text.chars().skip(chars.saturating_sub(keep)).collect();
    (head, tail)
}

/// The text that stands in for an evicted result.
fn placeholder(path: &WsPath, text: &str, chars: usize, preview: usize) -> String {
    let lines = text.lines().count();
    let keep = preview.min(chars / 2);
    let (head, tail) = head_tail(text, chars, keep);
    let omitted = chars - 2 * keep;
    format!(
        "[Tool output too large for the context: {} characters, {} lines, {} bytes. The full output was saved to \
         `{path}`.\nRead it in pages with read_file: path=\"{path}\", offset=<first line, 0-based>, limit=<number of \
         lines>; for example offset=0, limit=200, then offset=200, limit=200. Do not read it whole.]\n\n\
         --- first {} characters ---\n{head}\n--- {} characters omitted ---\n--- last {} characters ---\n{tail}",
        thousands(chars),
        thousands(lines),
        thousands(text.len()),
        thousands(keep),
        thousands(omitted),
        thousands(keep),
    )
}

/// The result cut to about `max` characters, head and tail, with a marker saying why.
fn cut_in_place(text: &str, chars: usize, max: usize, error: &str) -> String {
    const MARKER_ROOM: usize = 300;
    let keep = max.saturating_sub(MARKER_ROOM) / 2;
    let (head, tail) = head_tail(text, chars, keep);
    format!(
        "{head}\n…[{} characters omitted: the full output could not be saved ({})]…\n{tail}",
        thousands(chars - 2 * keep),
        excerpt(error, 150)
    )
}

/// `output` with its text blocks replaced by one block of `text` (at the first text block's
/// place); images and other blocks stay.
fn replace_text(output: ToolOutput, text: String) -> ToolOutput {
    let mut content = Vec::with_capacity(output.content.len());
    let mut replacement = Some(text);
    for block in output.content {
        if block.as_text().is_none() {
            content.push(block);
        } else if let Some(text) = replacement.take() {
            content.push(Block::text(text));
        }
    }
    ToolOutput {
        content,
        is_error: output.is_error,
    }
}

/// Tokens of `text` by the kernel's estimate.
fn token_estimate(text: &str) -> u64 {
    u64::try_from(harness_core::estimate_tokens(text)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_names_path_size_and_paging() {
        let text: String = (0..5_000).map(|line| format!("line {line}\n")).collect();
        let chars = text.chars().count();
        let path = WsPath::parse("large_tool_results/a/c1-00.txt").unwrap_or_default();
        let shown = placeholder(&path, &text, chars, 100);
        assert!(shown.contains("`large_tool_results/a/c1-00.txt`"), "{shown}");
        assert!(shown.contains(&format!("{} characters, 5,000 lines", thousands(chars))));
        assert!(shown.contains("read_file") && shown.contains("offset=0, limit=200"));
        assert!(shown.contains("--- first 100 characters ---\nline 0\nline 1\n"));
        assert!(shown.ends_with("line 4999\n"));
        assert!(shown.chars().count() < 1_000);
    }

    #[test]
    fn cutting_in_place_respects_the_limit_and_says_why() {
        let text = "é".repeat(10_000);
        let cut = cut_in_place(&text, 10_000, 2_000, "disk full");
        assert!(cut.chars().count() <= 2_000, "{}", cut.chars().count());
        assert!(cut.contains("characters omitted: the full output could not be saved (disk full)"));
    }

    #[test]
    fn names_are_safe_and_numbers_readable() {
        assert_eq!(file_stem("call/../x y"), "call____x_y");
        assert_eq!(file_stem(""), "call");
        assert_eq!(
            (thousands(0), thousands(999), thousands(1_000), thousands(1_234_567)),
            (
                "0".to_owned(),
                "999".to_owned(),
                "1,000".to_owned(),
                "1,234,567".to_owned()
            )
        );
    }

    #[test]
    fn config_is_checked() {
        assert_eq!(ToolResultEvictionConfig::default().validate(), Ok(()));
        assert_eq!(
            ToolResultEvictionConfig::default().max_chars(10).validate(),
            Err(EvictionConfigError::MaxTooSmall(10))
        );
        assert!(matches!(
            ToolResultEvictionConfig::default().preview_chars(40_000).validate(),
            Err(EvictionConfigError::PreviewTooLarge { .. })
        ));
        assert!(matches!(
            ToolResultEvictionConfig::default().dir("../x").validate(),
            Err(EvictionConfigError::InvalidDir(_))
        ));
    }

    #[test]
    fn replacing_text_keeps_other_blocks_and_the_error_flag() {
        let image = Block::Image {
            source: harness_core::MediaSource::Path { path: "a.png".into() },
        };
        let output = ToolOutput {
            content: vec![Block::text("a"), image.clone(), Block::text("b")],
            is_error: true,
        };
        let replaced = replace_text(output, "placeholder".into());
        assert_eq!(replaced.content, vec![Block::text("placeholder"), image]);
        assert!(replaced.is_error);
    }
}
