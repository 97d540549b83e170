pub mod carry;
pub mod deferred;
pub mod figures;
pub mod hide;
pub mod host;
pub mod pipeline;
pub mod prune;
pub mod truncate;
pub mod view;

pub use carry::Carry;
pub use deferred::{Unfilled, may_withhold, may_withhold_knowing};
pub use figures::Figures;
pub use pipeline::{Projection, TurnInput, project, project_carried, resumable_view};
