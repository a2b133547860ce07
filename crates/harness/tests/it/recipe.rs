//! ARCHITECTURE.md's "Add a capability" recipe, followed through the public API only: a
//! capability of this test crate with its own `harness.toml` section, session slot, tool and
//! builder setting, which its children inherit.

use crate::support::ctx;
use harness::capability::{Capability, CapabilityError, ConfigSection, Registration, Sections, Setup, SlotKey};
use harness::{HarnessAgent, HarnessConfig, WorkspaceLoader};
use harness_core::{JsonSchema, SessionSlot, Tool, ToolContext, ToolError, ToolOutput, TypedTool, async_trait, typed};
use harness_models::ScriptedModel;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

// 1. The section: a serde type that refuses unknown keys, under its own key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct GreeterSection {
    greeting: String,
}

impl ConfigSection for GreeterSection {
    const KEY: &'static str = "greeter";
}

// 2. The session slot: typed state the capability keeps per session.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Greeted(u32);

impl SessionSlot for Greeted {
    const KEY: &'static str = "greeter.count";
}

// 3. The tool.
#[derive(Debug, Deserialize, JsonSchema)]
struct GreetArgs {}

struct Greet {
    greeting: String,
}

#[async_trait]
impl TypedTool for Greet {
    const NAME: &'static str = "greet";
    const DESCRIPTION: &'static str = "Greets, and counts the greetings of this session.";
    type Args = GreetArgs;

    async fn call(&self, _: GreetArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let mut count = 0;
        ctx.session
            .update::<Greeted, _>(|greeted| {
                greeted.0 += 1;
                count = greeted.0;
            })
            .map_err(|err| ToolError::failed(err.to_string()))?;
        Ok(ToolOutput::text(format!("{} #{count}", self.greeting)))
    }
}

// 4. The capability.
struct Greeter {
    greeting: String,
}

impl Capability for Greeter {
    fn name(&self) -> &'static str {
        "greeter"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![typed(Greet {
            greeting: self.greeting.clone(),
        })]
    }

    fn session_slots(&self) -> &'static [SlotKey] {
        const { &[SlotKey::of::<Greeted>()] }
    }
}

// 5. The builder setting (a type only this capability reads), recorded for children.
#[derive(Clone)]
struct GreetingOverride(String);

// 6. The registration: built for every agent, and for each of its children.
fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let greeting = match setup.take::<GreetingOverride>() {
        Some(GreetingOverride(text)) => Some(text),
        None => setup.section::<GreeterSection>()?.map(|section| section.greeting),
    };
    let Some(greeting) = greeting else {
        return Ok(None);
    };
    if greeting.is_empty() {
        return Err(CapabilityError::new("greeter", "greeting must not be empty"));
    }
    setup.inherit(GreetingOverride(greeting.clone()));
    Ok(Some(Arc::new(Greeter { greeting })))
}

const GREETER: Registration = Registration::new("greeter", build).with_section::<GreeterSection>();

fn sections() -> Sections {
    Sections::builtin().with(GREETER)
}

/// The text of the tool results the model was sent, in order.
fn tool_outputs(model: &ScriptedModel) -> Vec<String> {
    model
        .requests()
        .last()
        .map(|request| {
            request
                .messages
                .iter()
                .flat_map(|msg| msg.content.iter())
                .filter(|block| matches!(block, harness_core::Block::ToolResult { .. }))
                .map(|block| format!("{block:?}"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_section_is_checked_against_the_registry_given_at_parse_time() {
    let path = Path::new("harness.toml");
    let text = "[greeter]\ngreeting = \"hello\"\n";
    let config = HarnessConfig::parse_with(text, path, &sections()).unwrap();
    let section = config.section::<GreeterSection>().unwrap().unwrap();
    assert_eq!(section.greeting, "hello");
    // Without the registration the section is unknown, and the error names it.
    let err = HarnessConfig::parse(text, path).unwrap_err().to_string();
    assert!(err.contains("unknown section `greeter`"), "{err}");
    // A typo inside it names the key.
    let err = HarnessConfig::parse_with("[greeter]\ngreting = \"x\"\n", path, &sections())
        .unwrap_err()
        .to_string();
    assert!(err.contains("greting"), "{err}");
}

#[tokio::test]
async fn a_registered_capability_offers_its_tool_and_keeps_its_slot_across_turns() {
    let dir = tempfile::tempdir().unwrap();
    let config = HarnessConfig::parse_with(
        "[greeter]\ngreeting = \"hello\"\n",
        Path::new("harness.toml"),
        &sections(),
    )
    .unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("greet", json!({}))
        .reply_text("done")
        .reply_tool_call("greet", json!({}))
        .reply_text("done again");
    let agent = crate::support::builder()
        .workspace(dir.path())
        .config(config)
        .register(GREETER)
        .permissions(crate::support::unattended())
        .model(model.clone())
        .build()
        .unwrap();
    assert!(agent.capabilities().contains(&"greeter"), "{:?}", agent.capabilities());
    agent.call("greet me", ctx("alice", "s1")).await.unwrap();
    agent.call("again", ctx("alice", "s1")).await.unwrap();
    assert!(model.requests()[0].tools.iter().any(|tool| tool.name == "greet"));
    let outputs = tool_outputs(&model);
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert!(outputs[0].contains("hello #1"), "{outputs:?}");
    // The slot was saved with the session and read back by the next turn.
    assert!(outputs[1].contains("hello #2"), "{outputs:?}");
}

#[tokio::test]
async fn the_builder_setting_wins_and_a_bad_value_is_a_build_error_naming_the_capability() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("greet", json!({}))
        .reply_text("ok");
    let agent = crate::support::builder()
        .workspace(dir.path())
        .register(GREETER)
        .setting(GreetingOverride("ahoy".into()))
        .permissions(crate::support::unattended())
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("greet", ctx("bob", "s1")).await.unwrap();
    let outputs = tool_outputs(&model);
    assert!(outputs.len() == 1 && outputs[0].contains("ahoy #1"), "{outputs:?}");
    let err = crate::support::builder()
        .workspace(dir.path())
        .register(GREETER)
        .setting(GreetingOverride(String::new()))
        .model(ScriptedModel::new())
        .build()
        .unwrap_err();
    assert!(
        harness_core::error_chain(&err).contains("greeting must not be empty"),
        "{err}"
    );
    // Off when neither the section nor the setting asks for it.
    let off = crate::support::builder()
        .workspace(dir.path())
        .register(GREETER)
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    assert!(!off.capabilities().contains(&"greeter"));
}

#[tokio::test]
async fn the_workspace_loader_accepts_the_section_and_registers_the_capability() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        format!(
            "[agent]\nmodel = \"scripted:{}\"\n[memory]\nenabled = false\n[greeter]\ngreeting = \"moin\"\n",
            dir.path().join("replies.json").display()
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("replies.json"), r#"{"replies": [{"text": "hi"}]}"#).unwrap();
    let env = |_: &str| None;
    // Unregistered, the file is refused, naming the section.
    let err = WorkspaceLoader::new(dir.path(), &env)
        .extensions(false)
        .load()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("greeter"), "{err}");
    let loaded = WorkspaceLoader::new(dir.path(), &env)
        .extensions(false)
        .register(GREETER)
        .load()
        .await
        .unwrap();
    let agent = loaded.builder.build().unwrap();
    assert!(agent.capabilities().contains(&"greeter"), "{:?}", agent.capabilities());
}

#[tokio::test]
async fn a_child_agent_is_built_with_the_registered_capability_and_its_setting() {
    let dir = tempfile::tempdir().unwrap();
    // The parent spawns the built-in general-purpose child; the child greets; both answer.
    let model = ScriptedModel::new()
        .reply_tool_call(
            "agent_spawn",
            json!({"agent_id": "general-purpose", "task": "greet", "label": "g", "timeout_seconds": 60}),
        )
        .reply_tool_call("greet", json!({}))
        .reply_text("child done")
        .reply_text("parent done");
    let agent = crate::support::builder()
        .workspace(dir.path())
        .register(GREETER)
        .setting(GreetingOverride("servus".into()))
        .permissions(crate::support::unattended())
        .model(model.clone())
        .build()
        .unwrap();
    let reply = agent.call("delegate", ctx("carol", "s1")).await.unwrap();
    assert_eq!(reply.text(), "parent done");
    let requests = model.requests();
    // The child's first request offers the inherited capability's tool...
    assert!(requests[1].tools.iter().any(|tool| tool.name == "greet"), "child tools");
    // ...and the greeting it ran with is the parent's builder setting (the child's last
    // request holds its tool result).
    let text = format!("{:?}", requests[2].messages);
    assert!(text.contains("servus #1"), "{text}");
    agent.shutdown(std::time::Duration::from_secs(5)).await;
}

#[test]
fn an_inherited_recipe_lists_each_capabilitys_recorded_settings() {
    let mut inherited = harness::capability::Inherited::default();
    inherited.insert(GreetingOverride("x".into()));
    inherited.insert(GreetingOverride("y".into()));
    assert!(inherited.has::<GreetingOverride>());
    assert_eq!(inherited.setting_names().len(), 1, "one entry per type");
}

#[test]
fn an_agent_built_without_the_registration_has_no_greeter() {
    let dir = tempfile::tempdir().unwrap();
    let agent: HarnessAgent = crate::support::builder()
        .workspace(dir.path())
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    assert!(!agent.capabilities().contains(&"greeter"));
}

#[tokio::test]
async fn the_parents_builder_settings_reach_its_children() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("NOTES.md"), "NOTES-MARKER: the team's notes").unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call(
            "agent_spawn",
            json!({"agent_id": "general-purpose", "task": "read the notes", "label": "n", "timeout_seconds": 60}),
        )
        .reply_text("child done")
        .reply_text("parent done");
    let agent = crate::support::builder()
        .workspace(dir.path())
        .additional_context_file("NOTES.md")
        .max_context_tokens(1234)
        .permissions(crate::support::unattended())
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("delegate", ctx("dave", "s1")).await.unwrap();
    let requests = model.requests();
    let system = |request: &harness_core::ChatRequest| request.system.render();
    assert!(
        system(&requests[0]).contains("NOTES-MARKER"),
        "the parent sees its file"
    );
    // The child was built from the parent's recipe: the builder's context file reaches it
    // (before, a child was built from harness.toml alone and lost it).
    assert!(
        system(&requests[1]).contains("NOTES-MARKER"),
        "{}",
        system(&requests[1])
    );
    agent.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn background_children_stop_before_the_mcp_servers_they_call() {
    // Capabilities shut down last registered first: subagents (which wait for background
    // children) must come after extensions (which stop the MCP servers) in build order.
    let dir = tempfile::tempdir().unwrap();
    let env = harness_mcp::HostEnv::from_vars(Vec::new());
    let extensions = harness::extensions::Extensions::start(Default::default(), &env, dir.path(), false)
        .await
        .unwrap();
    let agent = crate::support::builder()
        .workspace(dir.path())
        .extensions(Arc::new(extensions))
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    let order = agent.capabilities();
    let position = |name: &str| {
        order
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("{name}: {order:?}"))
    };
    assert!(position("extensions") < position("subagents"), "{order:?}");
}

/// Counts its shutdowns.
struct Counted(Arc<std::sync::atomic::AtomicUsize>);

#[async_trait]
impl Capability for Counted {
    fn name(&self) -> &'static str {
        "counted"
    }

    async fn shutdown(&self, _deadline: tokio::time::Instant) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_capability_shared_with_children_is_shut_down_once_by_its_owner() {
    let dir = tempfile::tempdir().unwrap();
    let stops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .reply_tool_call(
            "agent_spawn",
            json!({"agent_id": "general-purpose", "task": "t", "label": "c", "timeout_seconds": 60}),
        )
        .reply_text("child done")
        .reply_text("parent done");
    let agent = crate::support::builder()
        .workspace(dir.path())
        .capability(Arc::new(Counted(Arc::clone(&stops))))
        .permissions(crate::support::unattended())
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("delegate", ctx("erin", "s1")).await.unwrap();
    assert_eq!(model.requests().len(), 3, "the child ran");
    agent.shutdown(std::time::Duration::from_secs(5)).await;
    // The child (shut down by the parent's subagents capability) shares the capability and
    // leaves it to its owner.
    assert_eq!(stops.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_section_owned_twice_is_an_error_naming_both_owners() {
    const SECOND: Registration = Registration::section_only::<GreeterSection>("greeter-again");
    let path = Path::new("harness.toml");
    let err = HarnessConfig::parse_with("", path, &sections().with(SECOND))
        .unwrap_err()
        .to_string();
    assert!(err.contains("[greeter]") && err.contains("greeter-again"), "{err}");
    let err = crate::support::builder()
        .register(GREETER)
        .register(SECOND)
        .model(ScriptedModel::new())
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, harness::BuildError::SectionClash(clash) if clash.first == "greeter" && clash.second == "greeter-again"),
        "{err}"
    );

    // One of harness.toml's own sections cannot be taken over either.
    #[derive(Debug, Clone, Deserialize)]
    struct FakeMemory {}
    impl ConfigSection for FakeMemory {
        const KEY: &'static str = "memory";
    }
    const MEMORY: Registration = Registration::section_only::<FakeMemory>("my-memory");
    let clash = Sections::builtin().with(MEMORY).clash().unwrap();
    assert_eq!(
        (clash.key, clash.first, clash.second),
        ("memory", "harness.toml itself", "my-memory")
    );
    assert_eq!(
        Sections::builtin().clash(),
        None,
        "the built-in sections are owned once"
    );
}
