//! What one spec resync request lists, within the broker's ceiling.
//!
//! A source answers a request (sdk-go's source client, as Maestro's server over MQTT; sdk-go's and
//! Maestro's gRPC brokers) by sending every work it holds that the request does not list or lists
//! at an older version, every work it is deleting, and then a deletion for every listed id it
//! does not hold. A request that lists every work the agent holds costs the bytes of what changed;
//! a broker's ceiling (128 KB on AWS IoT Core: about 1,700 listings) may leave no room for that.
//! Splitting the list into parts would not help: each part's answer re-sends every work the part
//! leaves out. So one request lists what fits, and a work left out comes back whole: bytes, not
//! correctness. The room goes first to what only a listing can answer — deletions the agent waits
//! for the source to confirm, then works the source did not confirm in an earlier answer — and
//! then to the works whose re-sending would cost the most.
//!
//! When works are left out the agent must still learn which of them the source no longer holds
//! (a work deleted while the agent was away: the answer simply lacks it). An end marker, an id no
//! source holds, is listed last: the source answers it with a deletion after everything else, so
//! its arrival says the answer is complete, and a work left out that did not come back by then is
//! one the source did not confirm ([`super::desync`]). The marker only prompts a question: the
//! agent asks about those works again, listed, and deletes only on the source's own deletion.

use std::collections::HashSet;

use cloudevents::codec::ResourceVersion;

/// Bytes of `{"resourceVersions":[]}`, the list without entries.
pub const EMPTY_LIST_BYTES: usize = r#"{"resourceVersions":[]}"#.len();

/// Bytes one listing adds to the request's JSON, its separating comma included.
pub fn listing_bytes(v: &ResourceVersion) -> usize {
    // {"resourceID":"<id>","resourceVersion":<n>} and a comma: 36 bytes besides the id and
    // the number (serde_json escapes nothing in an id of Kubernetes name characters).
    const FIXED: usize = r#"{"resourceID":"","resourceVersion":}"#.len() + 1;
    FIXED + escaped_len(&v.resource_id) + decimal_len(v.resource_version)
}

/// Bytes of `s` as a JSON string's contents.
fn escaped_len(s: &str) -> usize {
    s.chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{08}' | '\u{0c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum()
}

/// Digits (and sign) of `n` in decimal.
fn decimal_len(n: i64) -> usize {
    let mut len = usize::from(n < 0);
    let mut rest = n.unsigned_abs();
    loop {
        len += 1;
        rest /= 10;
        if rest == 0 {
            return len;
        }
    }
}

/// One work the agent may list, with what leaving it out would cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its id and the version the agent holds.
    pub version: ResourceVersion,
    /// About how many bytes the source would send for it when left out (its stored size).
    pub weight: usize,
}

/// What one request lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The listings, in order; the end marker, when there is one, last.
    pub versions: Vec<ResourceVersion>,
    /// The ids of held works left out: the source sends each back if it still holds it.
    pub left_out: HashSet<String>,
    /// The end marker's id, when works are left out.
    pub marker: Option<String>,
    /// Deletions to confirm that found no room (asked in a later round).
    pub confirmations_left_out: usize,
}

/// Lists `first` (deletions to confirm, at version 0), then `asked` (works to ask about again),
/// then `rest` by weight, heaviest first, in `room` bytes of list entries. When everything fits
/// and nothing is asked again, everything is listed and there is no marker; else `marker` (an id
/// no source holds) is listed last, so that the end of the answer is seen, and what did not fit
/// is left out.
pub fn list(
    first: &[ResourceVersion],
    asked: &[Candidate],
    rest: &[Candidate],
    room: usize,
    marker: impl FnOnce() -> String,
) -> Listing {
    let total: usize = first.iter().map(listing_bytes).sum::<usize>()
        + asked
            .iter()
            .chain(rest)
            .map(|c| listing_bytes(&c.version))
            .sum::<usize>();
    if total <= room && asked.is_empty() {
        let versions = first
            .iter()
            .cloned()
            .chain(asked.iter().chain(rest).map(|c| c.version.clone()))
            .collect();
        return Listing {
            versions,
            ..Listing::default()
        };
    }
    let marker = ResourceVersion {
        resource_id: marker(),
        resource_version: 1,
    };
    let mut left = room.saturating_sub(listing_bytes(&marker));
    let mut listing = Listing::default();
    for version in first {
        let bytes = listing_bytes(version);
        if bytes <= left {
            left -= bytes;
            listing.versions.push(version.clone());
        } else {
            listing.confirmations_left_out += 1;
        }
    }
    // The heaviest first: each listed work is one the source need not send back.
    let mut rest: Vec<&Candidate> = rest.iter().collect();
    rest.sort_by_key(|c| std::cmp::Reverse(c.weight));
    for candidate in asked.iter().chain(rest) {
        let bytes = listing_bytes(&candidate.version);
        if bytes <= left {
            left -= bytes;
            listing.versions.push(candidate.version.clone());
        } else {
            listing
                .left_out
                .insert(candidate.version.resource_id.clone());
        }
    }
    listing.marker = Some(marker.resource_id.clone());
    listing.versions.push(marker);
    listing
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::codec::ResourceVersionList;

    fn version(id: &str, v: i64) -> ResourceVersion {
        ResourceVersion {
            resource_id: id.into(),
            resource_version: v,
        }
    }

    fn candidate(id: &str, weight: usize) -> Candidate {
        Candidate {
            version: version(id, 3),
            weight,
        }
    }

    /// The ids a listing lists, in order.
    fn ids(listing: &Listing) -> Vec<&str> {
        listing
            .versions
            .iter()
            .map(|v| v.resource_id.as_str())
            .collect()
    }

    fn json_len(versions: Vec<ResourceVersion>) -> usize {
        serde_json::to_vec(&ResourceVersionList {
            resource_versions: versions,
        })
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
    }

    #[test]
    fn a_listing_counts_the_bytes_serde_writes() {
        let cases = [
            version("7cd72b22-0d0e-4e4e-9d4b-2f4c9a0b1c11", 1),
            version("w1", 0),
            version("w-22", 1_234_567_890),
            version("quote\"back\\slash\u{1}", -5),
            version("ünïcode", i64::MAX),
        ];
        for n in 0..=cases.len() {
            let list = cases[..n].to_vec();
            let counted = EMPTY_LIST_BYTES + list.iter().map(listing_bytes).sum::<usize>()
                - usize::from(n > 0);
            assert_eq!(counted, json_len(list), "{n} listings");
        }
        // The figure the benchmark measured: 74 bytes a work named by a UUID at one digit.
        assert_eq!(listing_bytes(&cases[0]), 74);
    }

    #[test]
    fn everything_is_listed_without_a_marker_when_it_fits() {
        let rest = vec![candidate("a", 1), candidate("b", 2)];
        let room: usize = rest.iter().map(|c| listing_bytes(&c.version)).sum();
        let listing = list(&[version("gone", 0)], &[], &rest, room + 100, || {
            "marker".into()
        });
        assert_eq!(listing.marker, None);
        assert!(listing.left_out.is_empty());
        let ids = ids(&listing);
        assert_eq!(ids, ["gone", "a", "b"]);
    }

    #[test]
    fn a_list_over_the_room_keeps_what_only_a_listing_answers_and_the_heaviest() {
        let rest: Vec<_> = (0..100)
            .map(|i| candidate(&format!("w{i:03}"), i))
            .collect();
        let asked = vec![candidate("suspect", 0)];
        let room = 1_000;
        let listing = list(&[version("gone", 0)], &asked, &rest, room, || {
            "end-marker".into()
        });
        let ids = ids(&listing);
        assert_eq!(ids.first(), Some(&"gone"));
        assert_eq!(ids.get(1), Some(&"suspect"));
        assert_eq!(ids.last(), Some(&"end-marker"));
        assert_eq!(listing.marker.as_deref(), Some("end-marker"));
        // The heaviest after them, in order.
        assert_eq!(ids[2..5], ["w099", "w098", "w097"]);
        let bytes: usize = listing.versions.iter().map(listing_bytes).sum();
        assert!(bytes <= room, "{bytes} bytes in a room of {room}");
        // Every held work is either listed or left out, never both.
        assert_eq!(listing.versions.len() - 3 + listing.left_out.len(), 100);
        assert!(listing.left_out.contains("w000"));
        assert!(!listing.left_out.contains("w099"));
    }

    #[test]
    fn works_asked_about_again_get_a_marker_even_when_everything_fits() {
        let listing = list(
            &[],
            &[candidate("suspect", 0)],
            &[candidate("a", 1)],
            10_000,
            || "m".into(),
        );
        assert_eq!(listing.marker.as_deref(), Some("m"));
        assert!(listing.left_out.is_empty());
        let ids = ids(&listing);
        assert_eq!(ids, ["suspect", "a", "m"]);
    }

    #[test]
    fn no_room_at_all_lists_only_what_fits_and_says_what_was_left_out() {
        let listing = list(&[version("gone", 0)], &[], &[candidate("a", 1)], 10, || {
            "m".into()
        });
        // Not even the marker fits: it is still listed (the source answers it), nothing else.
        assert_eq!(listing.versions.len(), 1);
        assert_eq!(listing.confirmations_left_out, 1);
        assert!(listing.left_out.contains("a"));
    }
}
