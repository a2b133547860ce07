//! [`ModelSpec`]: a `provider:model` string, parsed once, built into a model with the
//! environment the binary passes in (libraries never read environment variables).
//!
//! | spec | key variable | base URL |
//! |---|---|---|
//! | `openai:MODEL` | `OPENAI_API_KEY` (optional when `OPENAI_BASE_URL` points elsewhere) | `OPENAI_BASE_URL`, default `https://api.openai.com/v1` |
//! | `dashscope:MODEL` | `DASHSCOPE_API_KEY` | `DASHSCOPE_BASE_URL`, default `https://dashscope.aliyuncs.com/compatible-mode/v1` |
//! | `deepseek:MODEL` | `DEEPSEEK_API_KEY` | `DEEPSEEK_BASE_URL`, default `https://api.deepseek.com/v1` |
//! | `ollama:MODEL` | none | `OLLAMA_HOST` (default `http://127.0.0.1:11434`) + `/v1` |
//! | `vllm:MODEL` | `VLLM_API_KEY` (optional) | `VLLM_BASE_URL`, default `http://127.0.0.1:8000/v1` |
//! | `openai-compatible:MODEL@BASE_URL` | `OPENAI_API_KEY` (optional) | the explicit `BASE_URL` |
//! | `glm:MODEL` | `ZHIPUAI_API_KEY` (or `GLM_API_KEY`) | `GLM_BASE_URL`, default `https://open.bigmodel.cn/api/paas/v4` |
//! | `gemini:MODEL` | `GEMINI_API_KEY` (or `GOOGLE_API_KEY`; optional when `GEMINI_BASE_URL` points elsewhere) | `GEMINI_BASE_URL`, default `https://generativelanguage.googleapis.com/v1beta` |
//! | `anthropic:MODEL` | `ANTHROPIC_API_KEY` (optional when `ANTHROPIC_BASE_URL` points elsewhere) | `ANTHROPIC_BASE_URL`, default `https://api.anthropic.com` |
//! | `scripted:PATH` | none | none: plays the JSON script at `PATH` ([`ScriptedModel`]) |
//!
//! Every preset also accepts an explicit base URL after the model: `ollama:qwen3@http://gpu:11434/v1`.
//! The vendors are data ([`PRESETS`]): adding an OpenAI-compatible vendor is one row.

use crate::anthropic::{AnthropicClient, AnthropicConfig};
use crate::gemini::{GeminiClient, GeminiConfig};
use crate::openai::{MaxTokensField, OpenAiClient, OpenAiConfig};
use crate::retry::{RetryObserver, RetryPolicy, Retrying};
use crate::scripted::{ScriptError, ScriptedModel};
use crate::secret::Secret;
use harness_core::ChatModel;
use std::path::PathBuf;
use std::sync::Arc;

/// Why a model could not be configured. Surfaced to the user as a configuration error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelConfigError {
    /// The spec string has the wrong shape.
    #[error("invalid model spec `{spec}`: {reason}")]
    InvalidSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// The provider is not one we know.
    #[error("unknown model provider `{provider}`; known providers: {known}")]
    UnknownProvider {
        /// The provider as given.
        provider: String,
        /// The known providers, comma-separated.
        known: String,
    },
    /// The provider needs an API key and its variable is unset.
    #[error("{var} is not set; export it or use --model scripted:PATH")]
    MissingKey {
        /// The environment variable that should hold the key.
        var: &'static str,
    },
    /// The base URL is not an http(s) URL.
    #[error("invalid base URL `{url}`: {reason}")]
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The API key cannot be sent in an HTTP header.
    #[error("the API key contains characters that cannot be sent in an HTTP header")]
    InvalidKey,
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client")]
    Http(#[source] reqwest::Error),
    /// A `scripted:` script could not be loaded.
    #[error(transparent)]
    Script(#[from] ScriptError),
}

/// Which wire protocol a preset speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    OpenAi,
    Anthropic,
    Gemini,
}

/// When a preset needs its key variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyRule {
    Required,
    /// Required for the vendor's own endpoint; optional when the base URL is overridden (local
    /// servers and proxies usually take any key or none).
    RequiredForDefaultBase,
    Optional,
}

/// One vendor: how to reach it and where its settings come from.
#[derive(Debug, PartialEq, Eq)]
struct Preset {
    provider: &'static str,
    protocol: Protocol,
    key_var: Option<(&'static str, KeyRule)>,
    /// A second variable read for the key when `key_var` is unset (`GLM_API_KEY` beside
    /// `ZHIPUAI_API_KEY`).
    key_alias: Option<&'static str>,
    /// The variable overriding the base URL.
    base_var: Option<&'static str>,
    default_base: &'static str,
    /// Appended to the base URL read from `base_var` or the default (Ollama's host → API base).
    base_suffix: &'static str,
    /// The output-cap field for the vendor's own endpoint (overridden bases get `max_tokens`).
    max_tokens_field: MaxTokensField,
    /// The base URL must be given in the spec (`MODEL@BASE_URL`).
    explicit_base: bool,
}

const fn openai_compatible(
    provider: &'static str,
    key_var: Option<(&'static str, KeyRule)>,
    base_var: Option<&'static str>,
    default_base: &'static str,
) -> Preset {
    Preset {
        provider,
        protocol: Protocol::OpenAi,
        key_var,
        key_alias: None,
        base_var,
        default_base,
        base_suffix: "",
        max_tokens_field: MaxTokensField::MaxTokens,
        explicit_base: false,
    }
}

/// The vendors, as data.
const PRESETS: &[Preset] = &[
    Preset {
        max_tokens_field: MaxTokensField::MaxCompletionTokens,
        ..openai_compatible(
            "openai",
            Some(("OPENAI_API_KEY", KeyRule::RequiredForDefaultBase)),
            Some("OPENAI_BASE_URL"),
            "https://api.openai.com/v1",
        )
    },
    openai_compatible(
        "dashscope",
        Some(("DASHSCOPE_API_KEY", KeyRule::Required)),
        Some("DASHSCOPE_BASE_URL"),
        "https://dashscope.aliyuncs.com/compatible-mode/v1",
    ),
    openai_compatible(
        "deepseek",
        Some(("DEEPSEEK_API_KEY", KeyRule::Required)),
        Some("DEEPSEEK_BASE_URL"),
        "https://api.deepseek.com/v1",
    ),
    Preset {
        base_suffix: "/v1",
        ..openai_compatible("ollama", None, Some("OLLAMA_HOST"), "http://127.0.0.1:11434")
    },
    openai_compatible(
        "vllm",
        Some(("VLLM_API_KEY", KeyRule::Optional)),
        Some("VLLM_BASE_URL"),
        "http://127.0.0.1:8000/v1",
    ),
    Preset {
        explicit_base: true,
        ..openai_compatible(
            "openai-compatible",
            Some(("OPENAI_API_KEY", KeyRule::Optional)),
            None,
            "",
        )
    },
    Preset {
        key_alias: Some("GLM_API_KEY"),
        ..openai_compatible(
            "glm",
            Some(("ZHIPUAI_API_KEY", KeyRule::Required)),
            Some("GLM_BASE_URL"),
            "https://open.bigmodel.cn/api/paas/v4",
        )
    },
    Preset {
        provider: "anthropic",
        protocol: Protocol::Anthropic,
        key_var: Some(("ANTHROPIC_API_KEY", KeyRule::RequiredForDefaultBase)),
        key_alias: None,
        base_var: Some("ANTHROPIC_BASE_URL"),
        default_base: "https://api.anthropic.com",
        base_suffix: "",
        max_tokens_field: MaxTokensField::MaxTokens,
        explicit_base: false,
    },
    Preset {
        provider: "gemini",
        protocol: Protocol::Gemini,
        key_var: Some(("GEMINI_API_KEY", KeyRule::RequiredForDefaultBase)),
        key_alias: Some("GOOGLE_API_KEY"),
        base_var: Some("GEMINI_BASE_URL"),
        default_base: "https://generativelanguage.googleapis.com/v1beta",
        base_suffix: "",
        max_tokens_field: MaxTokensField::MaxTokens,
        explicit_base: false,
    },
];

const SCRIPTED: &str = "scripted";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Preset {
        preset: &'static Preset,
        model: String,
        base_url: Option<String>,
    },
    Scripted(PathBuf),
}

/// A parsed `provider:model` spec (see the module table). Parse once, build when needed.
///
/// ```
/// use harness_models::ModelSpec;
/// let spec = ModelSpec::parse("deepseek:deepseek-chat")?;
/// assert_eq!((spec.provider(), spec.model()), ("deepseek", "deepseek-chat"));
/// let err = spec.build(&|_| None).err().map(|e| e.to_string());
/// assert_eq!(err.as_deref(), Some("DEEPSEEK_API_KEY is not set; export it or use --model scripted:PATH"));
/// # Ok::<_, harness_models::ModelConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    target: Target,
    /// The operator wrote this spec (`--model`, harness.toml, a root `subagents/` file): an
    /// explicit base URL in it gets the preset's key. See [`ModelSpec::untrusted`].
    operator: bool,
}

/// Every environment variable a model spec may read (API keys and base URLs of every
/// provider), so a caller can snapshot them once and build models later from the snapshot
/// (e.g. a subagent's `model` resolved at spawn, long after the borrowed `env` is gone).
pub fn spec_variables() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = PRESETS
        .iter()
        .flat_map(|preset| {
            preset
                .key_var
                .map(|(name, _)| name)
                .into_iter()
                .chain(preset.key_alias)
                .chain(preset.base_var)
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn known_providers() -> String {
    let mut names: Vec<&str> = PRESETS.iter().map(|p| p.provider).collect();
    names.push(SCRIPTED);
    names.join(", ")
}

impl ModelSpec {
    /// Parses `provider:model`, `provider:model@BASE_URL` or `scripted:PATH`.
    ///
    /// # Errors
    /// [`ModelConfigError::InvalidSpec`] or [`ModelConfigError::UnknownProvider`].
    pub fn parse(spec: &str) -> Result<Self, ModelConfigError> {
        let invalid = |reason: &str| ModelConfigError::InvalidSpec {
            spec: spec.to_owned(),
            reason: reason.to_owned(),
        };
        let spec = spec.trim();
        let Some((provider, rest)) = spec.split_once(':') else {
            return Err(invalid(
                "expected PROVIDER:MODEL, e.g. openai:gpt-4o, ollama:qwen3 or scripted:PATH",
            ));
        };
        if provider == SCRIPTED {
            if rest.is_empty() {
                return Err(invalid("expected scripted:PATH to a JSON script"));
            }
            return Ok(Self {
                target: Target::Scripted(PathBuf::from(rest)),
                operator: true,
            });
        }
        let Some(preset) = PRESETS.iter().find(|p| p.provider == provider) else {
            return Err(ModelConfigError::UnknownProvider {
                provider: provider.to_owned(),
                known: known_providers(),
            });
        };
        let (model, base_url) = match ["@http://", "@https://"].iter().filter_map(|m| rest.rfind(m)).max() {
            Some(at) => (&rest[..at], Some(rest[at + 1..].to_owned())),
            None => (rest, None),
        };
        if model.is_empty() {
            return Err(invalid("the model name is empty"));
        }
        if preset.explicit_base && base_url.is_none() {
            return Err(invalid(
                "expected openai-compatible:MODEL@BASE_URL, e.g. openai-compatible:qwen3@http://127.0.0.1:8000/v1",
            ));
        }
        if let Some(base) = &base_url {
            check_base_url(base)?;
        }
        Ok(Self {
            target: Target::Preset {
                preset,
                model: model.to_owned(),
                base_url,
            },
            operator: true,
        })
    }

    /// The same spec, from a source the operator did not write (a per-user file, anything
    /// the model could have written): the preset's key is then sent only to the preset's
    /// default base URL or to the URL in its base variable (`OPENAI_BASE_URL`, ...), never to
    /// a base URL named in the spec itself. Such a model is built without a key and a
    /// warning names the spec.
    #[must_use]
    pub fn untrusted(mut self) -> Self {
        self.operator = false;
        self
    }

    /// The base URL written in the spec (`MODEL@BASE_URL`), if any.
    pub fn explicit_base_url(&self) -> Option<&str> {
        match &self.target {
            Target::Preset { base_url, .. } => base_url.as_deref(),
            Target::Scripted(_) => None,
        }
    }

    /// The provider name (`openai`, `scripted`, …).
    pub fn provider(&self) -> &str {
        match &self.target {
            Target::Preset { preset, .. } => preset.provider,
            Target::Scripted(_) => SCRIPTED,
        }
    }

    /// The model name (for `scripted:`, the script path).
    pub fn model(&self) -> &str {
        match &self.target {
            Target::Preset { model, .. } => model,
            Target::Scripted(path) => path.to_str().unwrap_or_default(),
        }
    }

    /// Builds the model, with the default [`RetryPolicy`] around network providers.
    ///
    /// `env` looks up configuration variables; the binary passes `|k| std::env::var(k).ok()`,
    /// tests pass a map. Empty values count as unset.
    ///
    /// # Errors
    /// [`ModelConfigError`]: a missing key (naming its variable), a bad base URL, an unreadable
    /// script.
    pub fn build(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn ChatModel>, ModelConfigError> {
        self.build_with(env, RetryPolicy::default())
    }

    /// As [`build`](Self::build), with an explicit retry policy.
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_with(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        retry: RetryPolicy,
    ) -> Result<Arc<dyn ChatModel>, ModelConfigError> {
        self.build_with_options(env, &TransportOptions::default().retry(retry))
    }

    /// As [`build`](Self::build), with explicit transport settings (`[model]` in
    /// harness.toml): retry policy, idle timeout and a retry observer.
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_with_options(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        options: &TransportOptions,
    ) -> Result<Arc<dyn ChatModel>, ModelConfigError> {
        let retry = options.retry;
        let env = |key: &str| env(key).filter(|value| !value.trim().is_empty());
        let (preset, model, explicit_base) = match &self.target {
            Target::Scripted(path) => return Ok(Arc::new(ScriptedModel::from_file(path)?)),
            Target::Preset {
                preset,
                model,
                base_url,
            } => (*preset, model, base_url),
        };
        let overridden = explicit_base.clone().or_else(|| preset.base_var.and_then(env));
        let base_url = match &overridden {
            Some(base) if explicit_base.is_some() => base.trim_end_matches('/').to_owned(),
            Some(base) => format!("{}{}", normalize_host(base, preset), preset.base_suffix),
            None => format!("{}{}", preset.default_base, preset.base_suffix),
        };
        let uses_default_base = overridden.is_none();
        let origin = match (explicit_base, preset.base_var) {
            (Some(_), _) => Some("from the model spec".to_owned()),
            (None, Some(var)) if overridden.is_some() => Some(format!("set by {var}")),
            (None, Some(var)) => Some(format!("the default; {var} overrides it")),
            (None, None) => None,
        };
        // A key goes only where the operator sent it: the default base, the base variable's
        // URL, or a base URL the operator wrote in the spec.
        let foreign_base = !self.operator
            && explicit_base.as_deref().is_some_and(|base| {
                let base = base.trim_end_matches('/');
                let default = format!("{}{}", preset.default_base, preset.base_suffix);
                let from_var = preset
                    .base_var
                    .and_then(env)
                    .map(|value| format!("{}{}", normalize_host(&value, preset), preset.base_suffix));
                base != default.trim_end_matches('/')
                    && from_var.is_none_or(|value| base != value.trim_end_matches('/'))
            });
        if foreign_base && let Some((var, _)) = preset.key_var {
            tracing::warn!(
                spec = %self,
                "the model spec `{self}` names a base URL the operator did not write; {var} is not sent to it"
            );
        }
        let api_key = match preset.key_var {
            None => None,
            Some(_) if foreign_base => None,
            Some((var, rule)) => match (env(var).or_else(|| preset.key_alias.and_then(env)), rule) {
                (Some(key), _) => Some(Secret::new(key.trim())),
                (None, KeyRule::Required) => return Err(ModelConfigError::MissingKey { var }),
                (None, KeyRule::RequiredForDefaultBase) if uses_default_base => {
                    return Err(ModelConfigError::MissingKey { var });
                }
                (None, _) => None,
            },
        };
        Ok(match preset.protocol {
            Protocol::OpenAi => {
                let mut config = OpenAiConfig::new(model.clone(), base_url);
                config.api_key = api_key;
                config.idle_timeout = options.idle_timeout;
                config.base_url_origin = origin;
                config.max_tokens_field = if uses_default_base {
                    preset.max_tokens_field
                } else {
                    MaxTokensField::MaxTokens
                };
                Arc::new(Retrying::new(OpenAiClient::new(config)?, retry).with_observer(options.observer.clone()))
            }
            Protocol::Anthropic => {
                let mut config = AnthropicConfig::new(model.clone(), base_url);
                config.api_key = api_key;
                config.idle_timeout = options.idle_timeout;
                config.base_url_origin = origin;
                Arc::new(Retrying::new(AnthropicClient::new(config)?, retry).with_observer(options.observer.clone()))
            }
            Protocol::Gemini => {
                let mut config = GeminiConfig::new(model.clone(), base_url);
                config.api_key = api_key;
                config.idle_timeout = options.idle_timeout;
                config.base_url_origin = origin;
                Arc::new(Retrying::new(GeminiClient::new(config)?, retry).with_observer(options.observer.clone()))
            }
        })
    }
}

/// How network models are reached: the `[model]` section of harness.toml.
#[derive(Clone)]
#[non_exhaustive]
pub struct TransportOptions {
    /// Retries and the bound on a call's total time.
    pub retry: RetryPolicy,
    /// No byte for this long ends an attempt.
    pub idle_timeout: std::time::Duration,
    /// Hears of each retry as it happens.
    pub observer: Option<RetryObserver>,
}

impl Default for TransportOptions {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            idle_timeout: crate::DEFAULT_IDLE_TIMEOUT,
            observer: None,
        }
    }
}

impl std::fmt::Debug for TransportOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportOptions")
            .field("retry", &self.retry)
            .field("idle_timeout", &self.idle_timeout)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl TransportOptions {
    /// The same options with another retry policy.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The same options with another idle timeout.
    #[must_use]
    pub fn idle_timeout(mut self, idle_timeout: std::time::Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// The same options with a retry observer.
    #[must_use]
    pub fn observer(mut self, observer: Option<RetryObserver>) -> Self {
        self.observer = observer;
        self
    }
}

impl std::str::FromStr for ModelSpec {
    type Err = ModelConfigError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        Self::parse(spec)
    }
}

impl std::fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Target::Preset {
                preset,
                model,
                base_url: Some(base),
            } => write!(f, "{}:{model}@{base}", preset.provider),
            Target::Preset { preset, model, .. } => write!(f, "{}:{model}", preset.provider),
            Target::Scripted(path) => write!(f, "{SCRIPTED}:{}", path.display()),
        }
    }
}

/// A host variable (`OLLAMA_HOST=0.0.0.0:11434`) as a URL: a scheme and, for a bare host,
/// the vendor's default port are added.
fn normalize_host(value: &str, preset: &Preset) -> String {
    let value = value.trim().trim_end_matches('/');
    if value.contains("://") {
        return value.to_owned();
    }
    let has_port = value
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok());
    let default_port = preset.default_base.rsplit_once(':').map(|(_, port)| port);
    match default_port {
        Some(port) if !has_port && port.parse::<u16>().is_ok() => format!("http://{value}:{port}"),
        _ => format!("http://{value}"),
    }
}

/// Checks that `url` is an absolute http(s) URL; returns it without a trailing slash.
pub(crate) fn check_base_url(url: &str) -> Result<&str, ModelConfigError> {
    let trimmed = url.trim().trim_end_matches('/');
    let invalid = |reason: String| ModelConfigError::InvalidBaseUrl {
        url: url.to_owned(),
        reason,
    };
    let parsed = reqwest::Url::parse(trimmed).map_err(|err| invalid(err.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid("expected an http:// or https:// URL with a host".to_owned()));
    }
    Ok(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |key| map.get(key).cloned()
    }

    fn build_err(spec: &str, pairs: &[(&str, &str)]) -> String {
        let spec = ModelSpec::parse(spec).unwrap_or_else(|e| panic!("{e}"));
        match spec.build(&env(pairs)) {
            Ok(model) => format!("built {}", model.name()),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn specs_parse_and_display_round_trip() {
        for text in [
            "openai:gpt-4o",
            "dashscope:qwen-plus",
            "ollama:qwen3:8b",
            "openai-compatible:Qwen/Qwen3-8B@http://127.0.0.1:8000/v1",
            "ollama:llama3@https://gpu.local:11434/v1",
            "anthropic:claude-sonnet-4-5",
            "glm:glm-4.6",
            "gemini:gemini-2.5-flash",
            "scripted:tests/fixtures/a.json",
        ] {
            let spec = ModelSpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(spec.to_string(), text);
        }
        let spec = ModelSpec::parse("ollama:qwen3:8b").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((spec.provider(), spec.model()), ("ollama", "qwen3:8b"));
    }

    #[test]
    fn bad_specs_say_what_is_expected() {
        let err = |text: &str| ModelSpec::parse(text).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            err("gpt-4o"),
            "invalid model spec `gpt-4o`: expected PROVIDER:MODEL, e.g. openai:gpt-4o, ollama:qwen3 or scripted:PATH"
        );
        assert_eq!(
            err("foo:bar"),
            "unknown model provider `foo`; known providers: openai, dashscope, deepseek, ollama, vllm, openai-compatible, glm, anthropic, gemini, scripted"
        );
        assert!(err("openai-compatible:qwen").contains("openai-compatible:MODEL@BASE_URL"));
        assert_eq!(err("openai:"), "invalid model spec `openai:`: the model name is empty");
        assert!(err("openai:x@http://").starts_with("invalid base URL"));
    }

    #[test]
    fn missing_keys_name_their_variable() {
        assert_eq!(
            build_err("openai:gpt-4o", &[]),
            "OPENAI_API_KEY is not set; export it or use --model scripted:PATH"
        );
        assert_eq!(
            build_err("dashscope:qwen-plus", &[("DASHSCOPE_API_KEY", " ")]),
            "DASHSCOPE_API_KEY is not set; export it or use --model scripted:PATH"
        );
        assert_eq!(
            build_err("anthropic:claude", &[]),
            "ANTHROPIC_API_KEY is not set; export it or use --model scripted:PATH"
        );
        assert_eq!(
            build_err("deepseek:deepseek-chat", &[("DEEPSEEK_API_KEY", "k")]),
            "built deepseek-chat"
        );
        // A local server needs no key.
        assert_eq!(
            build_err("openai:any", &[("OPENAI_BASE_URL", "http://127.0.0.1:8787/v1")]),
            "built any"
        );
        assert_eq!(build_err("ollama:qwen3", &[]), "built qwen3");
        // GLM reads ZHIPUAI_API_KEY, or GLM_API_KEY when that is unset.
        assert_eq!(
            build_err("glm:glm-4.6", &[]),
            "ZHIPUAI_API_KEY is not set; export it or use --model scripted:PATH"
        );
        assert_eq!(build_err("glm:glm-4.6", &[("GLM_API_KEY", "k")]), "built glm-4.6");
        assert_eq!(build_err("glm:glm-4.6", &[("ZHIPUAI_API_KEY", "k")]), "built glm-4.6");
        assert_eq!(build_err("openai-compatible:m@http://127.0.0.1:1/v1", &[]), "built m");
        // Gemini reads GEMINI_API_KEY, or GOOGLE_API_KEY when that is unset; a local base
        // needs none.
        assert_eq!(
            build_err("gemini:gemini-2.5-flash", &[]),
            "GEMINI_API_KEY is not set; export it or use --model scripted:PATH"
        );
        assert_eq!(
            build_err("gemini:gemini-2.5-flash", &[("GOOGLE_API_KEY", "k")]),
            "built gemini-2.5-flash"
        );
        assert_eq!(
            build_err("gemini:gemini-2.5-flash", &[("GEMINI_BASE_URL", "http://127.0.0.1:1")]),
            "built gemini-2.5-flash"
        );
    }

    #[test]
    fn base_urls_come_from_presets_and_variables() {
        let preset = |name: &str| PRESETS.iter().find(|p| p.provider == name).unwrap_or(&PRESETS[0]);
        assert_eq!(normalize_host("0.0.0.0", preset("ollama")), "http://0.0.0.0:11434");
        assert_eq!(normalize_host("gpu:9999", preset("ollama")), "http://gpu:9999");
        assert_eq!(normalize_host("https://gpu/", preset("ollama")), "https://gpu");
        assert!(check_base_url("ftp://x").is_err());
        assert_eq!(check_base_url("http://x/v1/").ok(), Some("http://x/v1"));
        let got = build_err("openai:any", &[("OPENAI_BASE_URL", "http://exa mple")]);
        assert!(got.starts_with("invalid base URL"), "{got}");
    }

    #[test]
    fn scripted_specs_load_their_file() {
        let err = build_err("scripted:/nonexistent/script.json", &[]);
        assert_eq!(err, "cannot read script /nonexistent/script.json");
    }
}
