//! A live object cut down to what its rules read ([`Reads`]): the maps along each chain of
//! field selections keep only the selected keys (a key absent from the object stays absent, so
//! `has()` and missing-key errors are unchanged), and the value at a chain's end is whole. An
//! expression that only selects from the maps it reads cannot tell the difference.

use std::collections::HashMap;

use cel::common::types::{CelMap, CelMapKey};
use cel::common::value::Val;

use crate::cel::convert::{self, Borrowed, Owned, Strings};
use crate::cel::object_reads::Reads;

/// The CEL value of the parts of `json` that `reads` names, borrowing its strings.
pub(crate) fn project<'a>(json: &'a serde_json::Value, reads: &Reads) -> Box<dyn Val + 'a> {
    project_to::<Borrowed>(json, reads)
}

/// [`project`] with strings copied, to outlive `json`.
pub(crate) fn project_owned(json: &serde_json::Value, reads: &Reads) -> Box<dyn Val> {
    project_to::<Owned>(json, reads)
}

fn project_to<'j, 'v, S: Strings<'j, 'v>>(
    json: &'j serde_json::Value,
    reads: &Reads,
) -> Box<dyn Val + 'v> {
    match (reads, json) {
        (Reads::Fields(wanted), serde_json::Value::Object(fields)) => {
            let map: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = wanted
                .iter()
                .filter_map(|(key, read)| {
                    let (key, value) = fields.get_key_value(key)?;
                    Some((S::key(key), project_to::<S>(value, read)))
                })
                .collect();
            Box::new(CelMap::from(map))
        }
        // Not a map: selecting from it fails the same way whole.
        _ => convert::json_to::<S>(json),
    }
}

/// A rough size in memory of what [`project`] converts: string bytes plus a fixed cost per node.
pub(crate) fn estimated_bytes(json: &serde_json::Value, reads: &Reads) -> usize {
    const NODE: usize = 64;
    match (reads, json) {
        (Reads::Fields(wanted), serde_json::Value::Object(fields)) => {
            NODE + wanted
                .iter()
                .filter_map(|(key, read)| {
                    let value = fields.get(key)?;
                    Some(NODE + key.len() + estimated_bytes(value, read))
                })
                .sum::<usize>()
        }
        (_, serde_json::Value::String(s)) => NODE + s.len(),
        (_, serde_json::Value::Array(items)) => {
            NODE + items
                .iter()
                .map(|v| estimated_bytes(v, &Reads::Whole))
                .sum::<usize>()
        }
        (_, serde_json::Value::Object(fields)) => {
            NODE + fields
                .iter()
                .map(|(k, v)| NODE + k.len() + estimated_bytes(v, &Reads::Whole))
                .sum::<usize>()
        }
        _ => NODE,
    }
}

/// A copy of the parts of `json` that `reads` names (what [`project`] converts).
#[cfg(test)]
pub(crate) fn prune(json: &serde_json::Value, reads: &Reads) -> serde_json::Value {
    match (reads, json) {
        (Reads::Fields(wanted), serde_json::Value::Object(fields)) => serde_json::Value::Object(
            wanted
                .iter()
                .filter_map(|(key, read)| {
                    let (key, value) = fields.get_key_value(key)?;
                    Some((key.clone(), prune(value, read)))
                })
                .collect(),
        ),
        _ => json.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reads(source: &str) -> Reads {
        Reads::of(&cel::Env::stdlib().parser().parse(source).expect("parses"))
    }

    #[test]
    fn keeps_chains_and_whole_ends_only() {
        let object = json!({
            "metadata": {"name": "a", "managedFields": [{"manager": "x"}]},
            "spec": {"replicas": 3, "template": {"big": [1, 2, 3]}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "replicas": 3},
        });
        let r = reads(
            "object.status.conditions.exists(c, c.type == 'Ready') && has(object.spec.replicas) && has(object.spec.paused)",
        );
        assert_eq!(
            prune(&object, &r),
            json!({"spec": {"replicas": 3}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        );
        let value = cel::Value::try_from(project(&object, &r).as_ref()).expect("converts");
        let back = convert::value_to_json(&value).expect("json");
        assert_eq!(back, prune(&object, &r));
    }

    #[test]
    fn non_maps_along_a_chain_are_whole() {
        let object = json!({"spec": [1, 2], "status": "x"});
        let r = reads("object.spec.a == object.status.b");
        assert_eq!(prune(&object, &r), object);
        assert_eq!(prune(&json!([1]), &r), json!([1]));
    }

    #[test]
    fn estimated_bytes_count_only_what_is_read() {
        let object = json!({"a": {"b": "xyz", "c": [1, 2]}, "d": "long string here"});
        let r = reads("object.a.b == ''");
        // root, key a, map a, key b, "xyz"
        assert_eq!(
            estimated_bytes(&object, &r),
            64 + (64 + 1) + 64 + (64 + 1) + (64 + 3)
        );
        assert!(estimated_bytes(&object, &Reads::Whole) > estimated_bytes(&object, &r));
    }

    #[test]
    fn whole_reads_copy_everything() {
        let object = json!({"a": {"b": 1}, "c": 2});
        assert_eq!(prune(&object, &Reads::Whole), object);
        assert_eq!(prune(&object, &Reads::default()), json!({}));
    }
}
