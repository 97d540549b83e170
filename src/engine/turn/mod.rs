pub mod carry;
pub mod figures;
pub mod hide;
pub mod host;
pub mod pipeline;
pub mod prune;
pub mod sync;
pub mod truncate;
pub mod unworded;
pub mod view;

pub use carry::Carry;
pub use figures::Figures;
pub use pipeline::{Projection, TurnInput, baked, project, project_carried};
pub use unworded::{Unfilled, may_withhold, may_withhold_knowing};
