//! The capability seam: what a capability contributes, where its middleware lands, slot
//! claims, shutdown within a deadline, and configuration sections.

use crate::support::{builder, ctx};
use harness::BuildError;
use harness::capability::{Assembly, Capability, Layer, SlotKey};
use harness_core::{
    Hooks, JsonSchema, Middleware, PromptPart, Tool, ToolContext, ToolError, ToolOutput, TypedTool, async_trait, typed,
};
use harness_models::ScriptedModel;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

struct ProbeTool;

#[async_trait]
impl TypedTool for ProbeTool {
    const NAME: &'static str = "probe_tool";
    const DESCRIPTION: &'static str = "A probe.";
    type Args = NoArgs;

    async fn call(&self, _: NoArgs, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("probed"))
    }
}

struct Named(&'static str);

impl Middleware for Named {
    fn name(&self) -> &'static str {
        self.0
    }

    fn hooks(&self) -> Hooks {
        Hooks::NONE
    }
}

/// Session slot types the probes claim (the third shares compaction's key).
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct ProbeSlot;
impl harness_core::SessionSlot for ProbeSlot {
    const KEY: &'static str = "probe";
}
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct OtherSlot;
impl harness_core::SessionSlot for OtherSlot {
    const KEY: &'static str = "other";
}
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct NamedLikeCompaction;
impl harness_core::SessionSlot for NamedLikeCompaction {
    const KEY: &'static str = "compaction";
}

/// A capability contributing one of everything.
struct Probe {
    layer: Layer,
    slots: &'static [SlotKey],
    shut_down: Arc<AtomicBool>,
    hang_at_shutdown: bool,
    offers_tool: bool,
}

impl Probe {
    fn at(layer: Layer) -> Self {
        Self {
            layer,
            slots: const { &[SlotKey::of::<ProbeSlot>()] },
            shut_down: Arc::default(),
            hang_at_shutdown: false,
            offers_tool: true,
        }
    }
}

#[async_trait]
impl Capability for Probe {
    fn name(&self) -> &'static str {
        "probe"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        if self.offers_tool {
            vec![typed(ProbeTool)]
        } else {
            Vec::new()
        }
    }

    fn middleware(&self, _: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(self.layer, Arc::new(Named("probe")))]
    }

    fn prompt_parts(&self) -> Vec<PromptPart> {
        vec![
            PromptPart {
                name: "probe_stable",
                text: "PROBE STABLE PART".into(),
                stable: true,
            },
            PromptPart {
                name: "probe_volatile",
                text: "PROBE VOLATILE PART".into(),
                stable: false,
            },
        ]
    }

    fn session_slots(&self) -> &'static [SlotKey] {
        self.slots
    }

    async fn shutdown(&self, _deadline: tokio::time::Instant) {
        if self.hang_at_shutdown {
            std::future::pending::<()>().await;
        }
        self.shut_down.store(true, Ordering::SeqCst);
    }
}

#[test]
fn middleware_order_is_the_layer_not_the_registration_order() {
    let dir = tempfile::tempdir().unwrap();
    let agent = builder()
        .workspace(dir.path())
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    assert_eq!(
        agent.middleware_order(),
        [
            "session_persistence",
            "session_control",
            "tool_result_eviction",
            "structured_output_calls",
            "client_tools",
            "subagents",
            "permissions",
            "workspace_context",
            "structured_output",
            "client_tools_offer"
        ]
    );
    let capabilities = agent.capabilities();
    assert_eq!(capabilities.first(), Some(&"file_tools"));
    assert_eq!(capabilities.last(), Some(&"structured_output"));
    assert!(!capabilities.contains(&"memory") && !capabilities.contains(&"shell"));

    // Registered last, a capability's middleware still lands in its layer.
    let agent = builder()
        .workspace(dir.path())
        .model(ScriptedModel::new())
        .capability(Arc::new(Probe::at(Layer::Compaction)))
        .build()
        .unwrap();
    assert_eq!(
        agent.middleware_order(),
        [
            "session_persistence",
            "session_control",
            "probe",
            "tool_result_eviction",
            "structured_output_calls",
            "client_tools",
            "subagents",
            "permissions",
            "workspace_context",
            "structured_output",
            "client_tools_offer"
        ]
    );
    let agent = builder()
        .workspace(dir.path())
        .model(ScriptedModel::new())
        .capability(Arc::new(Probe::at(Layer::Session)))
        .build()
        .unwrap();
    assert_eq!(
        agent.middleware_order()[..3],
        ["session_persistence", "session_control", "probe"]
    );
}

#[tokio::test]
async fn a_capability_contributes_tools_and_prompt_parts() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_text("ok");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .capability(Arc::new(Probe::at(Layer::Memory)))
        .build()
        .unwrap();
    agent.call("hi", ctx("u1", "s1")).await.unwrap();
    let request = &model.requests()[0];
    assert!(request.tools.iter().any(|spec| spec.name == "probe_tool"));
    let (stable, volatile) = request.system.split_stable();
    assert!(stable.contains("PROBE STABLE PART"), "{stable}");
    // After the workspace guide, before the injected files.
    let at = stable.find("PROBE STABLE PART").unwrap();
    assert!(stable.find("## Workspace\n").unwrap() < at);
    assert!(at < stable.find("## Workspace Files (Injected)").unwrap());
    assert!(volatile.ends_with("PROBE VOLATILE PART"), "{volatile}");
    assert!(!stable.contains("PROBE VOLATILE PART"));
}

#[test]
fn two_capabilities_cannot_claim_one_session_slot() {
    let dir = tempfile::tempdir().unwrap();
    let err = builder()
        .workspace(dir.path())
        .model(ScriptedModel::new())
        .compaction(harness::compaction::CompactionConfig::default())
        .capability(Arc::new(Probe {
            slots: const { &[SlotKey::of::<NamedLikeCompaction>()] },
            ..Probe::at(Layer::Memory)
        }))
        .build()
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            BuildError::SlotClash {
                slot: "compaction",
                first: "compaction",
                second: "probe"
            }
        ),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_runs_every_capability_and_keeps_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let finished = Probe::at(Layer::Memory);
    let finished_flag = Arc::clone(&finished.shut_down);
    let hanging = Probe {
        slots: const { &[SlotKey::of::<OtherSlot>()] },
        hang_at_shutdown: true,
        offers_tool: false,
        ..Probe::at(Layer::Memory)
    };
    let hanging_flag = Arc::clone(&hanging.shut_down);
    let agent = builder()
        .workspace(dir.path())
        .model(ScriptedModel::new())
        .capability(Arc::new(finished))
        .capability(Arc::new(hanging))
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    agent.shutdown(Duration::from_secs(5)).await;
    // The hanging one is abandoned at the deadline; the other still ran.
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert!(finished_flag.load(Ordering::SeqCst));
    assert!(!hanging_flag.load(Ordering::SeqCst));
}

#[test]
fn an_unknown_section_is_an_error_that_names_it() {
    let err = harness::HarnessConfig::parse("[agent]\n[sandboxx]\nkind = 1\n", std::path::Path::new("t"))
        .err()
        .map(|err| err.to_string())
        .unwrap_or_default();
    assert!(err.contains("sandboxx"), "{err}");
}

/// The prompt promises only what holds: without a shell, the file tools' isolation; with a
/// host shell, that the shell is not confined — and indeed `cat ../bob/notes.txt` works.
#[tokio::test]
async fn the_prompt_claims_only_what_the_host_shell_allows() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("bob")).unwrap();
    std::fs::write(dir.path().join("bob/notes.txt"), "bob's secret plan").unwrap();

    let model = ScriptedModel::new().reply_text("ok");
    let agent = builder().workspace(dir.path()).model(model.clone()).build().unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let prompt = model.requests()[0].system.render();
    assert!(
        prompt.contains("the file tools cannot reach other users' areas"),
        "{prompt}"
    );
    assert!(!prompt.contains("never reachable"), "{prompt}");
    assert!(!prompt.contains("## Shell"), "{prompt}");

    let shell_fs = harness_fs::LocalFs::new(dir.path())
        .unwrap()
        .with_shell(harness_fs::LocalShellConfig::default());
    let model = ScriptedModel::new()
        .reply_tool_call("execute", serde_json::json!({"command": "cat ../bob/notes.txt"}))
        .reply_text("done");
    let agent = builder()
        .workspace(dir.path())
        .filesystem(Arc::new(shell_fs))
        .model(model.clone())
        .permissions(crate::support::unattended())
        .build()
        .unwrap();
    agent.call("read bob's notes", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    let prompt = requests[0].system.render();
    assert!(prompt.contains(harness::tools::shell::SHELL_PROMPT), "{prompt}");
    assert!(
        prompt.contains("other users' data included, can be reachable"),
        "{prompt}"
    );
    assert!(!prompt.contains("never reachable"), "{prompt}");
    // What the prompt warns about is real: the host shell reached bob's file.
    let result = format!("{:?}", requests[1].messages.last());
    assert!(result.contains("bob's secret plan"), "{result}");

    // A shared area is said to be shared.
    let model = ScriptedModel::new().reply_text("ok");
    let agent = builder()
        .workspace(dir.path())
        .isolation(harness_fs::IsolationScope::Global)
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s2")).await.unwrap();
    let prompt = model.requests()[0].system.render();
    assert!(prompt.contains("All users share one area"), "{prompt}");
}

/// A capability's section reaches it from `harness.toml`; a builder setting wins over it.
#[test]
fn the_eviction_section_and_the_builder_setting_reach_the_capability() {
    let dir = tempfile::tempdir().unwrap();
    let parse = |text: &str| harness::HarnessConfig::parse(text, std::path::Path::new("harness.toml")).unwrap();
    let build = |config: harness::HarnessConfig| {
        builder()
            .workspace(dir.path())
            .model(ScriptedModel::new())
            .config(config)
    };
    let has_eviction = |agent: &harness::HarnessAgent| agent.middleware_order().contains(&"tool_result_eviction");

    assert!(has_eviction(&build(parse("")).build().unwrap()));
    let off = parse("[tool_result_eviction]\nenabled = false\n");
    assert!(!has_eviction(&build(off.clone()).build().unwrap()));
    let on_again = build(off)
        .tool_result_eviction(Some(harness::eviction::ToolResultEvictionConfig::default()))
        .build()
        .unwrap();
    assert!(has_eviction(&on_again));
    assert!(!has_eviction(
        &build(parse("")).tool_result_eviction(None).build().unwrap()
    ));
    let err = build(parse("[tool_result_eviction]\nmax_chars = 10\n"))
        .build()
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            BuildError::Capability {
                capability: "tool_result_eviction",
                ..
            }
        ),
        "{err:?}"
    );
}
