//! What kind of code an image holds, by its file name: shared by the QEMU plugin (which ends
//! multi-threaded slices only in the program's own code) and the marker placement on the host.

/// The role of a mapped ELF image in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// The dynamic loader: runs first, and differently per environment; never a marker.
    Loader,
    /// A language runtime every program links (C, C++, math, threads): markers only as a last
    /// resort, and its per-CPU routines never.
    Runtime,
    /// The program: its main image and its own libraries (`liblzma` for `xz`).
    Own,
}

/// Classifies an image by its file name (`libc.so.6`, `liblzma.so.5.4.1`, `xz`).
pub fn image_kind(name: &str) -> ImageKind {
    if name.starts_with("ld-linux") || name.starts_with("ld.so") || name.starts_with("ld64.so") {
        return ImageKind::Loader;
    }
    let base = name.split(".so").next().unwrap_or(name);
    match base {
        "libc" | "libm" | "libstdc++" | "libgcc_s" | "libpthread" | "libdl" | "librt" => {
            ImageKind::Runtime
        }
        _ => ImageKind::Own,
    }
}

/// Whether `name` is one of the images named by `prefixes` (`libgomp` matches
/// `libgomp.so.1.0.0`): the prefix must end at the name's end or at a `.`.
pub fn image_matches(name: &str, prefixes: &[String]) -> bool {
    prefixes.iter().any(|p| {
        name.strip_prefix(p.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_matches() {
        assert_eq!(image_kind("ld-linux-x86-64.so.2"), ImageKind::Loader);
        assert_eq!(image_kind("libc.so.6"), ImageKind::Runtime);
        assert_eq!(image_kind("libstdc++.so.6.0.30"), ImageKind::Runtime);
        assert_eq!(image_kind("liblzma.so.5.4.1"), ImageKind::Own);
        assert_eq!(image_kind("xz"), ImageKind::Own);
        let ex = vec!["libgomp".to_string(), "libiomp5".to_string()];
        assert!(image_matches("libgomp.so.1.0.0", &ex));
        assert!(image_matches("libiomp5.so", &ex));
        assert!(!image_matches("libgompx.so", &ex));
        assert!(!image_matches("xz", &ex));
    }
}
