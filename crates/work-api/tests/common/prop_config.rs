//! The runner config of the property tests of hostile input, shared by the crates' test files
//! (included with `#[path]`: `work-api`'s, `agent`'s and `conditions`').

use proptest::test_runner::Config;

/// `PROPTEST_CASES` cases per property, else `default_cases`; failures are not written to files
/// (a failing case is printed, and the seed reproduces it).
pub fn config(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}
