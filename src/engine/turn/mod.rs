pub mod hide;
pub mod host;
pub mod pipeline;
pub mod prune;
pub mod sync;
pub mod truncate;
pub mod unworded;
pub mod view;

pub use pipeline::{Projection, TurnInput, baked, project};
pub use unworded::{Unfilled, may_withhold};
