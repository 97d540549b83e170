pub mod apply;
pub mod archive;
pub mod boundary;
pub mod call;
pub mod panel;
pub mod parse_args;
pub mod rebuild;
pub mod reclaim;
