//! Builds the C shim the runtime links (`src/shim.c`).

// The thread-local counter and the section bounds need C: Rust has no stable thread_local
// statics with a C symbol, nor weak references to linker-made symbols.
fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    cc::Build::new()
        .file("src/shim.c")
        .flag("-fPIC")
        .opt_level(2)
        .compile("bbv_shim");
}
