//! Issue 23, one pass per start: harness.toml is parsed once and each capability section
//! decoded once, and the workspace's `subagents/` files are read once.

use harness::capability::{Capability, ConfigSection, Registration, Sections};
use harness::{HarnessConfig, WorkspaceLoader};
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many times [`Counted`] was decoded.
static DECODED: AtomicUsize = AtomicUsize::new(0);

/// A section that counts its decodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "CountedRaw")]
struct Counted {
    word: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountedRaw {
    word: String,
}

impl From<CountedRaw> for Counted {
    fn from(raw: CountedRaw) -> Self {
        DECODED.fetch_add(1, Ordering::SeqCst);
        Self { word: raw.word }
    }
}

impl ConfigSection for Counted {
    const KEY: &'static str = "counted";
}

struct Reader;

impl Capability for Reader {
    fn name(&self) -> &'static str {
        "counted"
    }
}

/// A capability that reads its section when it is built.
const COUNTED: Registration = Registration::new("counted", |setup| {
    let section = setup.section::<Counted>()?;
    Ok(section
        .filter(|section| section.word == "hi")
        .map(|_| Arc::new(Reader) as Arc<dyn Capability>))
})
.with_section::<Counted>();

#[tokio::test]
async fn a_capability_section_is_decoded_once_from_the_parse_to_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[memory]\nenabled = false\n[counted]\nword = \"hi\"\n";
    std::fs::write(dir.path().join("harness.toml"), text).unwrap();
    let before = DECODED.load(Ordering::SeqCst);
    let config = HarnessConfig::load_with(dir.path(), &Sections::builtin().with(COUNTED)).unwrap();
    assert_eq!(
        DECODED.load(Ordering::SeqCst) - before,
        1,
        "the parse decodes the section"
    );
    assert_eq!(
        config.section::<Counted>().unwrap().map(|c| c.word),
        Some("hi".to_owned())
    );
    assert_eq!(
        config.section::<Counted>().unwrap().map(|c| c.word),
        Some("hi".to_owned())
    );
    assert_eq!(
        DECODED.load(Ordering::SeqCst) - before,
        1,
        "readers get the decoded value"
    );
    // The file is gone and would not parse: the loader uses the parsed value, and the
    // capability's build reads the decoded section.
    std::fs::write(dir.path().join("harness.toml"), "not toml [").unwrap();
    let env = |_: &str| None;
    let loaded = WorkspaceLoader::new(dir.path(), &env)
        .extensions(false)
        .register(COUNTED)
        .parsed(config)
        .load()
        .await
        .unwrap();
    let agent = loaded
        .builder
        .model(harness_models::ScriptedModel::new())
        .build()
        .unwrap();
    assert!(agent.capabilities().contains(&"counted"), "{:?}", agent.capabilities());
    assert_eq!(DECODED.load(Ordering::SeqCst) - before, 1, "decoded once in all");
    // An edited raw section is decoded again, not answered from the stale value.
    let mut edited = HarnessConfig::parse_with(text, dir.path(), &Sections::builtin().with(COUNTED)).unwrap();
    edited
        .capabilities
        .insert("counted".into(), toml::Value::Table("word = \"bye\"".parse().unwrap()));
    assert_eq!(
        edited.section::<Counted>().unwrap().map(|c| c.word),
        Some("bye".to_owned())
    );
}

#[tokio::test]
async fn the_subagent_files_are_read_once_when_the_loader_reads_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("subagents")).unwrap();
    std::fs::write(dir.path().join("harness.toml"), "[memory]\nenabled = false\n").unwrap();
    std::fs::write(
        dir.path().join("subagents/reviewer.md"),
        "---\ndescription: Reviews diffs\n---\nYou review.\n",
    )
    .unwrap();
    let env = |_: &str| None;
    let loaded = WorkspaceLoader::new(dir.path(), &env)
        .extensions(false)
        .load()
        .await
        .unwrap();
    // Had the build read the directory again, it would see this broken file and warn.
    std::fs::write(dir.path().join("subagents/reviewer.md"), "---\nhidden: true\n---\n").unwrap();
    let agent = loaded
        .builder
        .model(harness_models::ScriptedModel::new())
        .build()
        .unwrap();
    assert!(agent.subagent_warnings().is_empty(), "{:?}", agent.subagent_warnings());
    // A builder without the loader reads the directory itself.
    let direct = crate::support::builder()
        .workspace(dir.path())
        .model(harness_models::ScriptedModel::new())
        .build()
        .unwrap();
    assert_eq!(direct.subagent_warnings().len(), 1, "{:?}", direct.subagent_warnings());
}
