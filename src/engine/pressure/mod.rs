pub mod gauge;
pub mod nudge;
pub mod nudge_text;
pub mod offer;
pub mod prompt;
pub mod ranges;
pub mod recommend;
pub mod zone;
