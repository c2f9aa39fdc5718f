//! `work-agent crd` through the real binary.

use crate::common;

use common::{assert_refused, run, scratch};
use serde::Deserialize;
use serde_json::Value;

#[test]
fn prints_both_crds_as_multi_document_yaml() {
    let r = run(&["crd"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(&r.stdout)
        .map(|d| Value::deserialize(d).expect("YAML document"))
        .collect();
    let names: Vec<&str> = docs
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "manifestworks.work.open-cluster-management.io",
            "appliedmanifestworks.work.open-cluster-management.io"
        ]
    );
    assert!(docs.iter().all(|d| d["kind"] == "CustomResourceDefinition"));
}

#[test]
fn output_dir_gets_one_file_per_crd_identical_to_deploy_crds() {
    let dir = scratch("crd-out").join("nested/crds");
    let r = run(&["crd", "--output-dir", &dir.display().to_string()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let mut written: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    written.sort();
    assert_eq!(written.len(), 2);
    for name in written {
        let ours = std::fs::read_to_string(dir.join(&name)).unwrap();
        let committed =
            std::fs::read_to_string(deploy.join(&name)).expect("same file in deploy/crds");
        assert_eq!(
            ours, committed,
            "{name:?} differs from deploy/crds; run `make crds`"
        );
    }
}

#[test]
fn an_unwritable_output_dir_exits_two() {
    let dir = scratch("crd-bad");
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let r = run(&[
        "crd",
        "--output-dir",
        &file.join("sub").display().to_string(),
    ]);
    assert_refused(&r, "a-file");
}
