//! A build without the `git` feature refuses configured repositories, naming the feature.

use harness_skills::{SkillRepositorySource, Skills, SkillsConfig, SkillsError};

#[test]
fn configured_repositories_are_refused_naming_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let config = SkillsConfig {
        repositories: vec![SkillRepositorySource::head("https://example.test/skills.git")],
        ..SkillsConfig::default()
    };
    let err = Skills::new(config, dir.path(), false).unwrap_err();
    assert!(matches!(&err, SkillsError::GitFeatureOff { url } if url.contains("example.test")));
    assert!(err.to_string().contains("`git` feature"), "{err}");
    assert!(Skills::new(SkillsConfig::default(), dir.path(), false).is_ok());
}
