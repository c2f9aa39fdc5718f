//! Links the agent as a position-dependent executable on Linux with glibc, as Go links upstream's
//! and Maestro's agents. A position-independent one has its 1.5 MiB of pointer tables (vtables,
//! string and static references) rewritten by the loader at every start: 1.4 MiB of relocations
//! read and 1.5 MiB of private copies, 2.3 MiB of the agent's resident memory before any work
//! (docs/performance.md). The cost is address-space randomisation of the binary itself (shared
//! libraries, heap and stacks stay randomised). Static musl builds (the container image) keep
//! their default, a static position-independent executable.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
