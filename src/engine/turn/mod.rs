pub mod deferred;
pub mod figures;
mod file_effect;
pub mod hide;
pub mod history_index;
pub mod host;
mod leave_out;
pub mod pipeline;
pub mod prune;
pub mod reclaim;
pub mod truncate;
pub mod view;

pub use deferred::{Unfilled, may_withhold, may_withhold_knowing, may_withhold_once_read};
pub use figures::Figures;
pub use history_index::HistoryIndex;
pub use pipeline::{Projection, TurnInput, project, project_with_index, resumable_view};
