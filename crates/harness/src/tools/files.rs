//! The file tools: `read_file`, `write_file`, `edit_file`, `list_files`, `glob_files`,
//! `grep_files`. They work on the caller's namespaced filesystem,
//! [`CallWorkspace::layered`](harness_fs::CallWorkspace): the caller's own layer with the shared
//! files (AGENTS.md, knowledge/, MEMORY.md) showing through; writes go to the caller's layer.
//!
//! They do not read, list inside or search the harness's configuration and state
//! ([`READ_PROTECTED`]: `harness.toml`, `tools.json`, `.mcp.json`, `.harness/`, `agents/`), at
//! the caller's root or, under the shared scopes `agent` and `global`, inside a user's layer
//! (`<user>/agents/`): those hold credentials (a `[state] url` with a password) and other
//! users' conversations. A read is a clear error result; glob and grep results leave them out.
//! Writing them is the permission policy's business (a protected path asks).

use async_trait::async_trait;
use harness_core::{Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, TypedTool, typed};
use harness_fs::{
    CallScope, CallWorkspace, FileInfo, Filesystem, FsError, GrepMatch, GrepOptions, WriteMode, WsPath, truncate_chars,
};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write as _;
use std::sync::Arc;

/// Lines `read_file` returns when no limit is given.
pub const READ_DEFAULT_LIMIT: usize = 2000;
/// Longest line `read_file` shows, in characters; longer lines are cut with a marker.
pub const READ_MAX_LINE_CHARS: usize = 2000;
/// Most characters of one `read_file` result; the rest is left for the next page.
pub const READ_MAX_CHARS: usize = 60_000;
/// Most entries `list_files` shows.
pub const LIST_MAX_ENTRIES: usize = 1000;
/// Default and largest number of paths `glob_files` returns.
pub const GLOB_DEFAULT_LIMIT: usize = 500;
/// Largest `max_results` of `glob_files`.
pub const GLOB_MAX_LIMIT: usize = 2000;
/// Default number of matches `grep_files` returns.
pub const GREP_DEFAULT_LIMIT: usize = 200;
/// Largest `max_results` of `grep_files`.
pub const GREP_MAX_LIMIT: usize = 1000;
/// Most context lines `grep_files` shows around a match.
pub const GREP_MAX_CONTEXT: usize = 10;
/// Longest line `grep_files` shows, in characters.
pub const GREP_MAX_LINE_CHARS: usize = 500;
/// Most characters of a listing, glob or grep result.
pub const MAX_RESULT_CHARS: usize = 60_000;

/// The model's view: the call's work tree when it has one ([`harness_fs::CallWorkTree`], a
/// sandbox's, the directory `execute` sees), else the caller's layer with the shared files
/// showing through ([`CallWorkspace::layered`]).
fn workspace(ctx: &ToolContext) -> Result<&Arc<dyn Filesystem>, ToolError> {
    if let Some(harness_fs::CallWorkTree(tree)) = ctx.runtime.get::<harness_fs::CallWorkTree>() {
        return Ok(tree);
    }
    ctx.runtime
        .get::<CallWorkspace>()
        .map(|workspace| &workspace.layered)
        .ok_or_else(|| ToolError::failed("no workspace is bound to this call; the file tools cannot be used"))
}

/// Parses a path argument.
fn path_arg(raw: &str) -> Result<WsPath, ToolError> {
    WsPath::parse(raw).map_err(|err| fs_error(&err))
}

/// Workspace entries the file tools never read, list inside or search: the harness's own
/// configuration and state. Kept in step with the loaders by the test
/// `every_file_the_harness_reads_is_protected` (crates/harness/tests/it/trust_boundary.rs).
/// `memory/.quarantine` holds what the memory screen refused (text meant to reach a prompt):
/// only `harness memory review` shows it.
pub const READ_PROTECTED: &[&str] = &[
    "harness.toml",
    "tools.json",
    ".mcp.json",
    ".harness",
    "agents",
    "memory/.quarantine",
];

/// Which paths the file tools refuse to read for one call.
#[derive(Debug, Clone, Copy)]
struct ReadGuard {
    /// The caller's layer is the workspace root (scopes `agent` and `global`), so the first
    /// segment of a path may be another user's layer, whose entries are protected too.
    shared_root: bool,
}

impl ReadGuard {
    fn of(ctx: &ToolContext) -> Self {
        // No scope bound: assume the widest view, the workspace root.
        let shared_root = ctx
            .runtime
            .get::<CallScope>()
            .is_none_or(CallScope::is_shared_namespace);
        Self { shared_root }
    }

    /// The protected entry `path` is or lies inside, if any.
    fn protected_entry(self, path: &WsPath) -> Option<&'static str> {
        let segments: Vec<&str> = path.segments().collect();
        let first = segments.first()?;
        if let Some(entry) = read_protected_entry(&segments) {
            return Some(entry);
        }
        // Under a shared root, `<user>/agents/` is that user's state (from a run under
        // scope `user`), `<user>/tools.json` its own tools layer. A reserved first segment
        // (`knowledge/agents/`, `skills/.harness`) is not a user's layer.
        if self.shared_root
            && !harness_fs::RESERVED_NAMES
                .iter()
                .any(|name| name.eq_ignore_ascii_case(first))
        {
            return read_protected_entry(&segments[1..]);
        }
        None
    }

    /// An error result when `path` is protected.
    fn check(self, path: &WsPath) -> Result<(), ToolError> {
        match self.protected_entry(path) {
            Some(entry) => Err(ToolError::failed(format!(
                "{path} is refused: `{entry}` is the harness's own configuration or state (it can hold credentials and \
                 other users' conversations), and the file tools do not read, list or search it. Use the session and \
                 memory tools for earlier conversations; ask the operator for anything else in it."
            ))),
            None => Ok(()),
        }
    }

    fn allows(self, path: &WsPath) -> bool {
        self.protected_entry(path).is_none()
    }
}

/// The [`READ_PROTECTED`] entry that `segments` (a path from a layer's root) is or lies
/// inside (ASCII case ignored, so a case-insensitive disk gives no way around it).
fn read_protected_entry(segments: &[&str]) -> Option<&'static str> {
    READ_PROTECTED.iter().copied().find(|entry| {
        let parts: Vec<&str> = entry.split('/').collect();
        parts.len() <= segments.len()
            && parts
                .iter()
                .zip(segments)
                .all(|(part, segment)| part.eq_ignore_ascii_case(segment))
    })
}

/// The model's view of a filesystem error: the actionable message. The cause chain of an IO
/// failure goes to the log, not to the model.
use crate::filesystem::tool_error as fs_error;

/// Appends `line` to `out` unless that would pass `budget` characters; returns whether it fit.
fn push_bounded(out: &mut String, line: &str, budget: usize) -> bool {
    if out.len() + line.len() + 1 > budget {
        return false;
    }
    out.push_str(line);
    out.push('\n');
    true
}

// ---- read_file ----

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The file.
    pub path: String,
    /// 0-based first line (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Most lines (default and 0: 2000).
    #[serde(default)]
    pub limit: Option<i64>,
}

/// `read_file`: numbered lines of a text file, paged.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadFile;

#[async_trait]
impl TypedTool for ReadFile {
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str = "Read a workspace text file as numbered lines (`     1\\tfirst line`), at most 2000 per call, long lines cut; page with offset and limit.";
    type Args = ReadFileArgs;
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new().read_only().closed_world();

    async fn call(&self, args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let fs = workspace(ctx)?;
        let path = path_arg(&args.path)?;
        ReadGuard::of(ctx).check(&path)?;
        let offset = usize::try_from(args.offset.unwrap_or(0)).unwrap_or(usize::MAX);
        let limit = match args.limit {
            Some(limit) if limit > 0 => usize::try_from(limit).unwrap_or(usize::MAX),
            _ => READ_DEFAULT_LIMIT,
        };
        let page = fs.read_text(&path, offset, limit).await.map_err(|err| fs_error(&err))?;
        if page.total_lines == 0 {
            return Ok(ToolOutput::text(format!("{path} is empty")));
        }
        if page.lines.is_empty() {
            return Err(ToolError::failed(format!(
                "offset {offset} is past the end of {path} ({} lines); use an offset below {}",
                page.total_lines, page.total_lines
            )));
        }
        let mut out = String::new();
        let mut shown = 0;
        for (index, line) in page.lines.iter().enumerate() {
            let numbered = format!(
                "{:>6}\t{}",
                offset + index + 1,
                truncate_chars(line, READ_MAX_LINE_CHARS)
            );
            if !push_bounded(&mut out, &numbered, READ_MAX_CHARS) {
                break;
            }
            shown += 1;
        }
        let next = offset + shown;
        if next < page.total_lines {
            let _ = write!(
                out,
                "[showing lines {}-{} of {}; call read_file with offset={next} to continue]",
                offset + 1,
                next,
                page.total_lines
            );
        } else {
            out.pop(); // the last newline
        }
        Ok(ToolOutput::text(out))
    }
}

// ---- write_file ----

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Missing directories are created.
    pub path: String,
    /// The whole file.
    pub content: String,
    /// Replace an existing file.
    #[serde(default)]
    pub overwrite: bool,
}

/// `write_file`: creates a file, or replaces one when `overwrite` is set.
///
/// Creating is the default, as in the reference tool: a model that has not read a file cannot
/// clobber it by guessing a path. Replacing a whole file is sometimes right (regenerated
/// output, a rewrite), so it is possible, but only when asked for explicitly.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteFile;

#[async_trait]
impl TypedTool for WriteFile {
    const NAME: &'static str = "write_file";
    const DESCRIPTION: &'static str =
        "Create a workspace file; fails if it exists unless overwrite=true (to change part of a file use edit_file).";
    type Args = WriteFileArgs;
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new()
        .destructive(true)
        .idempotent()
        .closed_world()
        .concurrency_safe(false);

    async fn call(&self, args: WriteFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let fs = workspace(ctx)?;
        let path = path_arg(&args.path)?;
        let mode = if args.overwrite {
            WriteMode::Overwrite
        } else {
            WriteMode::CreateNew
        };
        match fs.write(&path, args.content.as_bytes(), mode).await {
            Ok(()) => Ok(ToolOutput::text(format!(
                "Written to {path} ({} bytes)",
                args.content.len()
            ))),
            Err(err @ FsError::AlreadyExists { .. }) => Err(ToolError::failed(format!(
                "{err}; to replace the whole file, call write_file again with overwrite=true"
            ))),
            Err(err) => Err(fs_error(&err)),
        }
    }
}

// ---- edit_file ----

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// The file.
    pub path: String,
    /// Text to replace; include nearby lines to make it unique.
    pub old_string: String,
    /// The replacement.
    pub new_string: String,
    /// Replace every occurrence.
    #[serde(default)]
    pub replace_all: bool,
}

/// `edit_file`: replaces text in a file, tolerating whitespace and indentation differences
/// (and saying so) when there is no exact match.
#[derive(Debug, Default, Clone, Copy)]
pub struct EditFile;

#[async_trait]
impl TypedTool for EditFile {
    const NAME: &'static str = "edit_file";
    const DESCRIPTION: &'static str = "Replace old_string (unique unless replace_all=true) with new_string in a workspace file; a match differing only in whitespace is used and reported.";
    type Args = EditFileArgs;
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new()
        .destructive(true)
        .closed_world()
        .concurrency_safe(false);

    async fn call(&self, args: EditFileArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let fs = workspace(ctx)?;
        let path = path_arg(&args.path)?;
        let outcome = fs
            .edit(&path, &args.old_string, &args.new_string, args.replace_all)
            .await
            .map_err(|err| fs_error(&err))?;
        let plural = if outcome.replacements == 1 { "" } else { "s" };
        let mut text = format!(
            "Edited {path} ({} replacement{plural}, first at line {})",
            outcome.replacements, outcome.line
        );
        if let Some(fuzzy) = outcome.fuzzy {
            let _ = write!(text, "\nNote: {fuzzy}");
        }
        Ok(ToolOutput::text(text))
    }
}

// ---- list_files ----

/// Arguments of `list_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Directory relative to the workspace root (`/` or empty: the root).
    pub path: String,
}

/// `list_files`: the entries of one directory.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListFiles;

fn entry_line(info: &FileInfo) -> String {
    if info.is_dir {
        format!("[DIR]  {}/", info.path)
    } else {
        format!("[FILE] {} ({} bytes)", info.path, info.size)
    }
}

#[async_trait]
impl TypedTool for ListFiles {
    const NAME: &'static str = "list_files";
    const DESCRIPTION: &'static str = "List a workspace directory's files and directories, with sizes.";
    type Args = ListFilesArgs;
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new().read_only().closed_world();

    async fn call(&self, args: ListFilesArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let fs = workspace(ctx)?;
        let path = path_arg(&args.path)?;
        ReadGuard::of(ctx).check(&path)?;
        let entries = fs.list(&path).await.map_err(|err| fs_error(&err))?;
        if entries.is_empty() {
            let exists = path.is_root() || fs.exists(&path).await.map_err(|err| fs_error(&err))?;
            return Ok(ToolOutput::text(if exists {
                format!("Empty directory: {path}")
            } else {
                format!("Directory not found: {path}")
            }));
        }
        let mut out = String::new();
        let mut shown = 0;
        for info in entries.iter().take(LIST_MAX_ENTRIES) {
            if !push_bounded(&mut out, &entry_line(info), MAX_RESULT_CHARS) {
                break;
            }
            shown += 1;
        }
        if shown < entries.len() {
            let _ = write!(
                out,
                "[{} more entries not shown; list a subdirectory or use glob_files]",
                entries.len() - shown
            );
        } else {
            out.pop();
        }
        Ok(ToolOutput::text(out))
    }
}

// ---- glob_files ----

/// Arguments of `glob_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobFilesArgs {
    /// `*`, `?`, `**`, `{a,b}`, `[abc]`; without `/` (`*.md`) it matches names at any
    /// depth, with `/` (`docs/*.md`) paths under `path`.
    pub pattern: String,
    /// Directory to search (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Default 500, at most 2000.
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// `glob_files`: files matching a pattern, sorted by path.
#[derive(Debug, Default, Clone, Copy)]
pub struct GlobFiles;

/// The reference semantics: a pattern without `/` matches file names at any depth.
fn glob_pattern(raw: &str) -> String {
    let trimmed = raw.trim().trim_start_matches('/');
    if trimmed.contains('/') || trimmed.starts_with("**") {
        trimmed.to_owned()
    } else {
        format!("**/{trimmed}")
    }
}

#[async_trait]
impl TypedTool for GlobFiles {
    const NAME: &'static str = "glob_files";
    const DESCRIPTION: &'static str = "Find workspace files by glob pattern; sorted paths with sizes.";
    type Args = GlobFilesArgs;
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new().read_only().closed_world();

    async fn call(&self, args: GlobFilesArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let fs = workspace(ctx)?;
        let base = path_arg(args.path.as_deref().unwrap_or(""))?;
        let limit = args
            .max_results
            .map_or(GLOB_DEFAULT_LIMIT, |limit| limit as usize)
            .clamp(1, GLOB_MAX_LIMIT);
        let guard = ReadGuard::of(ctx);
        guard.check(&base)?;
        let mut found = fs
            .glob(&base, &glob_pattern(&args.pattern), limit)
            .await
            .map_err(|err| fs_error(&err))?;
        found.retain(|info| guard.allows(&info.path));
        if found.is_empty() {
            return Ok(ToolOutput::text("No matching files found"));
        }
        let mut out = String::new();
        let mut shown = 0;
        for info in &found {
            if !push_bounded(
                &mut out,
                &format!("{} ({} bytes)", info.path, info.size),
                MAX_RESULT_CHARS,
            ) {
                break;
            }
            shown += 1;
        }
        if shown < found.len() || found.len() == limit {
            let _ = write!(
                out,
                "[results capped at {shown} paths; narrow the pattern or the path to see the rest]"
            );
        } else {
            out.pop();
        }
        Ok(ToolOutput::text(out))
    }
}

// ---- grep_files ----

/// Arguments of `grep_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepFilesArgs {
    /// Literal text unless regex=true.
    pub pattern: String,
    /// File or directory to search (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files matching this glob (`*.md`, `src/**/*.rs`).
    #[serde(default)]
    pub glob: Option<String>,
    /// The pattern is a regular expression.
    #[serde(default)]
    pub regex: bool,
    /// Ignore case.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Lines shown around each match (at most 10).
    #[serde(default)]
    pub context: Option<u32>,
    /// Default 200, at most 1000.
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// `grep_files`: matching lines as `path:line:text`, binary files skipped.
#[derive(Debug, Default, Clone, Copy)]
pub struct GrepFiles;

fn render_matches(matches: &[GrepMatch], with_context: bool) -> (String, usize) {
    let mut out = String::new();
    let mut shown = 0;
    // The last line printed, to avoid repeating overlapping context.
    let mut last: Option<(&WsPath, usize)> = None;
    for found in matches {
        let mut block = String::new();
        let contiguous = |line: usize| last.is_some_and(|(path, printed)| path == &found.path && line <= printed + 1);
        if with_context && last.is_some() && !contiguous(found.line.saturating_sub(found.before.len())) {
            block.push_str("--\n");
        }
        let first_before = found.line.saturating_sub(found.before.len());
        for (index, text) in found.before.iter().enumerate() {
            let line = first_before + index;
            if last.is_some_and(|(path, printed)| path == &found.path && line <= printed) {
                continue;
            }
            let _ = writeln!(
                block,
                "{}-{line}-{}",
                found.path,
                truncate_chars(text, GREP_MAX_LINE_CHARS)
            );
        }
        let _ = writeln!(
            block,
            "{}:{}:{}",
            found.path,
            found.line,
            truncate_chars(&found.text, GREP_MAX_LINE_CHARS)
        );
        for (index, text) in found.after.iter().enumerate() {
            let _ = writeln!(
                block,
                "{}-{}-{}",
                found.path,
                found.line + 1 + index,
                truncate_chars(text, GREP_MAX_LINE_CHARS)
            );
        }
        if out.len() + block.len() > MAX_RESULT_CHARS {
            break;
        }
        out.push_str(&block);
        shown += 1;
        last = Some((&found.path, found.line + found.after.len()));
    }
    (out, shown)
}

#[async_trait]
impl TypedTool for GrepFiles {
    const NAME: &'static str = "grep_files";
    const DESCRIPTION: &'static str =
        "Search workspace files; returns `path:line:text` lines (context as `path-line-text`).";
    type Args = GrepFilesArgs;
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new().read_only().closed_world();

    async fn call(&self, args: GrepFilesArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let fs = workspace(ctx)?;
        let base = path_arg(args.path.as_deref().unwrap_or(""))?;
        let max_matches = args
            .max_results
            .map_or(GREP_DEFAULT_LIMIT, |limit| limit as usize)
            .clamp(1, GREP_MAX_LIMIT);
        let context = args.context.map_or(0, |context| context as usize).min(GREP_MAX_CONTEXT);
        let options = GrepOptions {
            pattern: args.pattern,
            literal: !args.regex,
            case_insensitive: args.case_insensitive,
            glob: args.glob.filter(|glob| !glob.trim().is_empty()),
            context,
            max_matches,
        };
        let guard = ReadGuard::of(ctx);
        guard.check(&base)?;
        let mut matches = fs.grep(&base, &options).await.map_err(|err| fs_error(&err))?;
        matches.retain(|found| guard.allows(&found.path));
        if matches.is_empty() {
            return Ok(ToolOutput::text("No matches found"));
        }
        let (mut out, shown) = render_matches(&matches, context > 0);
        if shown < matches.len() || matches.len() == max_matches {
            let _ = write!(
                out,
                "[results capped at {shown} matches; narrow the pattern, path or glob to see the rest]"
            );
        } else {
            out.pop();
        }
        Ok(ToolOutput::text(out))
    }
}

/// The six file tools, ready for a toolkit.
pub fn file_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        typed(ReadFile),
        typed(WriteFile),
        typed(EditFile),
        typed(ListFiles),
        typed(GlobFiles),
        typed(GrepFiles),
    ]
}

/// The file tools' entry in the capability registry: always on.
pub(crate) const REGISTRATION: crate::capability::Registration =
    crate::capability::Registration::new("file_tools", |_| {
        Ok(Some(Arc::new(FileTools) as Arc<dyn crate::capability::Capability>))
    });

/// The file tools as a capability.
struct FileTools;

impl crate::capability::Capability for FileTools {
    fn name(&self) -> &'static str {
        "file_tools"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        file_tools()
    }
}

#[cfg(test)]
mod tests {
    use super::glob_pattern;

    #[test]
    fn bare_patterns_match_at_any_depth() {
        assert_eq!(glob_pattern("*.md"), "**/*.md");
        assert_eq!(glob_pattern("/docs/*.md"), "docs/*.md");
        assert_eq!(glob_pattern("**/x"), "**/x");
    }
}
