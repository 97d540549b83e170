//! The marker a cut tool output carries: an output that holds it is cut
//! already (by noa, or by whatever wrote the log) and is not cut again.

/// What identifies a truncated result; detection is a substring test.
pub const MARKER: &str = "[truncated for context space";

/// Whether `text` is a cut result already.
pub fn marked(text: &str) -> bool {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(MARKER));
    FINDER.find(text.as_bytes()).is_some()
}
